#!/usr/bin/env bash
# The pipeline benchmark on the device machine's 16-core Xeon, and the OpenVINO tests, from carried packages.
# Nothing can be installed there from a registry, and PyAV + OpenVINO wheels are over the 64 MiB a call may
# carry, so the command carries (here, in folders .git/info/exclude ignores):
#   .whl/av-*.whl                 PyAV
#   .ovpkg/ov.tar.xz              the openvino wheel's files for Python 3.12 without the GPU/NPU plugins, the
#                                 non-ONNX frontends, headers and the GPU kernel cache (CPU inference only)
#   .ovpkg/rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx   the model of `interop run`
# Made here once (from the repo root; ".whl/" and ".ovpkg/" listed in .git/info/exclude):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d /tmp/ovw openvino==2026.4.1
#   mkdir -p /tmp/ovw/x && (cd /tmp/ovw/x && unzip -q ../openvino-*.whl && cd openvino && rm -rf include cmake \
#       libs/cache.json libs/libopenvino_intel_{gpu,npu}_plugin.so \
#       libs/libopenvino_{tensorflow,tensorflow_lite,paddle,pytorch,jax,gguf}_frontend.so.*)
#   tar -C /tmp/ovw/x -cJf .ovpkg/ov.tar.xz openvino openvino-2026.4.1.dist-info          (~21 MB)
#   mkdir -p .ovpkg/rapidocr_onnxruntime/models && cp .venv/lib/python3.*/site-packages/rapidocr_onnxruntime/models/\
#       ch_PP-OCRv4_det_infer.onnx .ovpkg/rapidocr_onnxruntime/models/
# OpenCV, numpy and pytest are already there. Run with the device tool: carry [".whl", ".ovpkg"], command
#   bash bench/xeon_pipeline.sh   (REPS=5 bash bench/xeon_pipeline.sh on a noisy lease: more interleaved repetitions)
# Writes $OUT/pytest.log and $OUT/pipeline_{default,f32}.{json,md} (the text table on stdout).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT" /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/av-*.whl || exit 1
tar -C /tmp/site -xJf .ovpkg/ov.tar.xz || exit 1
export PYTHONPATH=$PWD:/tmp/site:$PWD/.ovpkg PYTHONUNBUFFERED=1
lscpu | grep -E "Model name|^CPU\(s\)" | tee "$OUT/cpu.txt"
python3 -c "import interop, openvino as ov, av, cv2; print('openvino', ov.get_version(), 'PyAV', av.__version__, 'cv2', cv2.__version__)"
python3 -m pytest -q -p no:cacheprovider tests/test_inference.py tests/test_mapper_ffmpeg_to_openvino.py \
    tests/test_accuracy.py tests/test_pipeline.py 2>&1 | tee "$OUT/pytest.log" | tail -15
python3 -m interop bench --only pipeline ${REPS:+--reps $REPS} --json "$OUT/pipeline_default.json" --md "$OUT/pipeline_default.md"
python3 -m interop bench --only pipeline --precision f32 ${REPS:+--reps $REPS} --json "$OUT/pipeline_f32.json" --md "$OUT/pipeline_f32.md"
