#!/usr/bin/env bash
# Sets up, builds and runs the 2-rank tensor-parallel inference demo on this machine: stories260K (a real
# pretrained Llama model) split over 2 ranks, one all-reduce after each attention and MLP block.
# The model comes from ../shared/models, or from models/ after tools/get-model.sh downloaded it.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh --target tbcoll-run --target tp_inference  # the demo's programs only, not the tests
model=../shared/models/stories260K.gguf
[ -f "$model" ] || model=models/stories260K.gguf
if [ ! -f "$model" ]; then
  echo "run-demo: no model; fetch it into ../shared/models with: $(pwd)/tools/get-model.sh" >&2
  exit 1
fi
build/tbcoll-run -n 2 -- build/examples/tp_inference/tp_inference --model "$model" \
  --prompt "Once upon a time" --tokens 200 "$@"
