#!/usr/bin/env bash
# One run on the NVIDIA machine: install the carried wheels, make the clips, run the GPU tests and the CUDA
# benchmark (`interop bench --only cuda`), print a table, write everything under $OUT (cuda.json, cuda.md, bench.log
# with the per-run figures, pytest.log, example.log).
# The benchmark's clips are synthetic (ultrafast, no B-frames): FFmpeg's frame threads gain more on them than on
# realistic encodes; to measure a figure on other clips, put them in $INTEROP_BENCH_CLIPS under the same names.
#   QUICK=1      short clips, 3 runs (a check that everything works)
#   TESTS=0      skip the GPU tests;  BENCH=0  skip the benchmarks
#   INTEROP_BENCH_PARTS=main,main_warm,aggregate_warm,aggregate,files,extra (default) or any: single streams
#       (cold, and with one idle NVDEC decoder held in the process for every case), N decoders
#       with one idle NVDEC decoder held in the process (every case alike) and without, files one after another
#       (raw against open_nvdec kept warm), experiments
#   INTEROP_BENCH_DECODERS=1,2,4,7 (default)   the decoder counts of the aggregate part
#   INTEROP_BENCH_RUNS_MANY_DECODERS=15 (default)   runs at 7 decoders (their figures take a few values run by run)
#   INTEROP_BENCH_CLIPS_ONLY='1080p H.264'      the single-stream part on those clips only
# A full run takes ~25 min on the H100 (main ~6, main_warm ~5, aggregate_warm ~5, aggregate ~6, files ~1, extra);
# where one command may run 10 min at most, run the parts in turn.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
t0=$(date +%s)
if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-deps --no-index .whl/*.whl 2>&1 | tail -3
fi
if ls .whl/opencl/*.whl >/dev/null 2>&1; then  # pyopencl and its pure-Python dependencies, for cuda_to_opencl
    $PY -m pip install -q --no-deps --no-index .whl/opencl/*.whl 2>&1 | tail -3
fi
# NVIDIA's OpenCL driver is often installed without its ICD file; register it for this run
if [ -z "${OCL_ICD_VENDORS:-}" ] && ! grep -qs nvidia /etc/OpenCL/vendors/*.icd && ldconfig -p | grep -q libnvidia-opencl.so.1; then
    mkdir -p "$OUT/icd" && echo libnvidia-opencl.so.1 > "$OUT/icd/nvidia.icd" && export OCL_ICD_VENDORS="$OUT/icd"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
$PY -c "import torch, av, numpy; print('torch', torch.__version__, 'PyAV', av.__version__, 'numpy', numpy.__version__, 'cuda', torch.cuda.is_available())"
$PY -c "import interop.benchmarks.cuda as b, time; t=time.time(); b.make_clips('${QUICK:-}' == '1'); print(f'clips ready in {time.time()-t:.0f} s')"
rc=0
if [ "${TESTS:-1}" = 1 ]; then
    $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_tensor_cuda.py tests/test_mapper_ffmpeg_to_cuda.py \
        tests/test_mapper_cuda_to_cpu.py tests/test_mapper_cpu_to_cuda.py tests/test_mapper_cuda_to_opencl.py tests/test_nvdec_warm.py 2>&1 | tee "$OUT/pytest.log" | tail -40
    rc=${PIPESTATUS[0]}
    $PY examples/cuda_infer.py --frames 300 --check 2>&1 | tee "$OUT/example.log" | tail -4
    $PY examples/cuda_opencl.py --frames 60 2>&1 | tee -a "$OUT/example.log" | tail -2
    [ "${EXAMPLE2:-0}" = 1 ] && $PY examples/cuda_infer.py --frames 300 --check --no-frame-threads 2>&1 | tee -a "$OUT/example.log" | tail -4
fi
if [ "${BENCH:-1}" = 1 ]; then
    $PY -m interop -v bench --only cuda ${QUICK:+--quick} --json "$OUT/cuda.json" --md "$OUT/cuda.md" 2> "$OUT/bench.log"
    tail -5 "$OUT/bench.log"
fi
echo "gpu.sh done in $(( $(date +%s) - t0 )) s (pytest rc=$rc)"
exit $rc
