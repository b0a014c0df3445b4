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
#   bash bench/xeon_pipeline.sh   (REPS=5 bash bench/xeon_pipeline.sh on a noisy lease: more interleaved repetitions;
#   TESTS=0 skips the OpenVINO tests, which run last, in the time a 10-minute call has left: LIMIT_S, default 570)
# Runs benchmark (b) (`interop bench --only pipeline`, plugin default precision = bf16 there, and f32), then the
# pre-processing benchmark (`interop bench --only preprocess`, both precisions), then checks issue 20's bounds:
# `interop run` >= 0.9x the plain network's infer-only fps with 0 copies (pipeline), and interop's pre-processing
# <= 10 % of the network's CPU per frame with interop's model on frames >= 0.9x the plain network (preprocess).
# $OUT gets at most 8 files (what the device tool brings back): log.txt (versions, tables, checks), results.md,
# pipeline_{default,f32}.json, preprocess_{default,f32}.json, profile.json (PROFILE=0 skips it: OpenVINO's
# per-layer times of interop's model against the plain network's, by node type), pytest.log.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
START=$SECONDS
LIMIT_S=${LIMIT_S:-570}
mkdir -p "$OUT" /tmp/site /tmp/xeon_md
LOG=$OUT/log.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/av-*.whl || exit 1
tar -C /tmp/site -xJf .ovpkg/ov.tar.xz || exit 1
export PYTHONPATH=$PWD:/tmp/site:$PWD/.ovpkg PYTHONUNBUFFERED=1
{ date -u; lscpu | grep -E "Model name|^CPU\(s\)|^Thread|^Core|^Socket"
  echo "flags: $(grep -o -w -E 'avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')load: $(cat /proc/loadavg)"
  python3 -c "import interop, openvino as ov, av, cv2; print('openvino', ov.get_version(), 'PyAV', av.__version__, 'cv2', cv2.__version__)"
} 2>&1 | tee "$LOG"
bench() {  # bench NAME TAG [args...]: one benchmark, its JSON in $OUT, its Markdown appended to results.md
    local name=$1 tag=$2; shift 2
    echo "== interop bench --only $name $* ($(( SECONDS - START )) s in)" | tee -a "$LOG"
    python3 -m interop bench --only "$name" ${REPS:+--reps $REPS} "$@" --json "$OUT/${name}_$tag.json" \
        --md "/tmp/xeon_md/${name}_$tag.md" 2>&1 | tee -a "$LOG"
    cat "/tmp/xeon_md/${name}_$tag.md" >> "$OUT/results.md" 2>/dev/null
}
bench pipeline default
bench pipeline f32 --precision f32
bench preprocess default
bench preprocess f32 --precision f32
echo "== checks ($(( SECONDS - START )) s in)" | tee -a "$LOG"
python3 - "$OUT" <<'PY' 2>&1 | tee -a "$LOG"
import json, os, sys
out, ok = sys.argv[1], True
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return {r["case"]: r for r in json.load(f)["results"]}
    except (OSError, ValueError, KeyError) as e:
        print(f"{name}: no results ({e})")
        return None
def check(what, value, good):
    global ok
    ok &= good
    print(f"{'PASS' if good else 'FAIL'} {what}: {value}")
for tag in ("default", "f32"):
    r = load(f"pipeline_{tag}.json")
    if r is None:
        ok = False
        continue
    run = r["interop run fps"]
    prec = run["details"]["precision"]
    ratio = r["run / plain network infer-only (target >= 0.9)"]["value"]
    check(f"pipeline {prec}: interop run / plain network infer-only >= 0.9", f"{ratio:.3f} ({run['value']:.1f} fps / "
          f"{r['infer-only fps (plain network, pre-processed tensors in memory)']['value']:.1f} fps)", ratio >= 0.9)
    check(f"pipeline {prec}: copies == 0", run["details"]["copies"], run["details"]["copies"] == 0)
    print(f"info pipeline {prec}: run / bound {r['run / bound (target >= 0.9)']['value']:.3f}, interop model / plain "
          f"network infer-only {r['interop model infer-only / plain network infer-only']['value']:.3f}, run ms per frame "
          f"{run['details']['ms_per_frame']}, requests {run['details']['requests']}")
for tag in ("default", "f32"):
    r = load(f"preprocess_{tag}.json")
    if r is None:
        ok = False
        continue
    for fmt in ("I420", "NV12"):
        alone = r[f"pre-processing alone: plane prefix (interop, nearest) + 1x1 conv, {fmt}: CPU ms per frame"]
        share = alone["details"]["share_of_network_cpu"]
        prec = alone["details"]["precision"]
        check(f"preprocess {prec}: interop's pre-processing alone <= 10 % of the network's CPU, {fmt}",
              f"{alone['value']:.2f} ms = {share:.3f}", share <= 0.10)
        fr = r[f"interop Inference, {fmt} frames: fps / plain network"]
        check(f"preprocess {prec}: interop Inference on {fmt} frames / plain network >= 0.9",
              f"{fr['value']:.3f} (pre-processing's share of CPU {fr['details']['pre_cpu_share']})", fr["value"] >= 0.9)
print("ALL PASS" if ok else "SOME FAIL")
PY
if [ "${PROFILE:-1}" != 0 ]; then  # where the time goes inside interop's model: per-layer, against the plain network
    echo "== per-layer profile ($(( SECONDS - START )) s in)" | tee -a "$LOG"
    timeout 120 python3 - 20 > "$OUT/profile.json" 2>>"$LOG" <<'PY'
"""Per-layer profile (OpenVINO PERF_COUNT, one request, LATENCY) of interop's model on mapped 1080p frames against
the plain network on host-pre-processed tensors, each precision: per node type, the difference is the
pre-processing's cost inside the graph. Prints one JSON line."""
import interop  # noqa: I001 - before openvino (TBB)
import collections, json, sys, time
import openvino as ov
from interop import textdet
from interop.benchmarks.pipeline import INPUT_SIZE, _inference, clip_path, host_preprocess
from interop.pipeline import open_video

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20
core = ov.Core()
w, h = INPUT_SIZE


def profile(comp, ins):
    req = comp.create_infer_request()
    for i in range(3):
        req.infer(ins[i % len(ins)])
    types, nodes = collections.Counter(), collections.Counter()
    t0 = time.perf_counter()
    for i in range(N):
        req.infer(ins[i % len(ins)])
        for p in req.get_profiling_info():
            us = p.real_time.total_seconds() * 1e6
            types[p.node_type] += us
            nodes[f"{p.node_name} [{p.node_type}/{p.exec_type}]"] += us
    wall = (time.perf_counter() - t0) / N * 1000
    return wall, {k: u / N / 1000 for k, u in types.items()}, {k: u / N / 1000 for k, u in nodes.items()}


report = {}
for prec in (None, "f32"):
    inf = _inference(prec)
    container, stream = open_video(clip_path())
    frames, vfs = [], []
    for vf in container.decode(stream):
        vfs.append(vf)
        frames.append(interop.map(interop.wrap(vf), inf.memory_type))
        if len(frames) == 4:
            break
    container.close()
    v = inf._prepare(frames[0])[0]
    cfg = {"PERF_COUNT": True, "PERFORMANCE_HINT": "LATENCY"}
    if prec:
        cfg["INFERENCE_PRECISION_HINT"] = prec
    ours = core.compile_model(v.model, "CPU", cfg)
    net = core.read_model(textdet.model_path())
    net.reshape({net.inputs[0]: ov.PartialShape([1, 3, h, w])})
    plain = core.compile_model(net, "CPU", cfg)
    wo, to, no = profile(ours, [inf._prepare(f)[1] for f in frames])
    wp, tp, npl = profile(plain, [[host_preprocess(vf)] for vf in vfs])
    diff = {k: round(to.get(k, 0) - tp.get(k, 0), 3) for k in set(to) | set(tp)}
    only = {k: round(u, 3) for k, u in sorted(no.items(), key=lambda kv: -kv[1])
            if k.split(" [")[1].split("/")[0] in {t for t, d in diff.items() if d > 0.05}}
    report[prec or "default"] = {
        "precision": str(ours.get_property("INFERENCE_PRECISION_HINT")),
        "ms_wall_ours": round(wo, 2), "ms_wall_plain": round(wp, 2),
        "ms_layers_ours": round(sum(to.values()), 3), "ms_layers_plain": round(sum(tp.values()), 3),
        "type_diff_ms": dict(sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:12]),
        "ours_nodes_of_grown_types_ms": dict(list(only.items())[:20]),
        "ours_types_ms": {k: round(u, 3) for k, u in sorted(to.items(), key=lambda kv: -kv[1])[:12]}}
    inf.close()
print(json.dumps(report))
PY
    echo "profile rc $?" | tee -a "$LOG"
fi
left=$(( LIMIT_S - (SECONDS - START) ))
if [ "${TESTS:-1}" != 0 ] && [ "$left" -gt 30 ]; then
    echo "== OpenVINO tests (${left} s left)" | tee -a "$LOG"
    timeout "$left" python3 -m pytest -q -p no:cacheprovider tests/test_inference.py tests/test_mapper_ffmpeg_to_openvino.py \
        tests/test_accuracy.py tests/test_pipeline.py > "$OUT/pytest.log" 2>&1
    echo "pytest rc $? ($(tail -1 "$OUT/pytest.log"))" | tee -a "$LOG"
fi
echo "== done in $(( SECONDS - START )) s" | tee -a "$LOG"
