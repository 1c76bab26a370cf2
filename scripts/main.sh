#!/usr/bin/env bash
# The main job: sets up the environment (seconds when nothing changed), then trains the dimtorch
# speech recogniser (waveforms to words: Conformer + CTC on speech synthesized by espeak-ng, the corpus
# made and cached on the first run; a few minutes on CPU; progress bar, dev WER/CER on held-out voices,
# plot, JSON summary and a checkpoint in runs/main: demo/train.py's defaults). Extra arguments go to
# demo/train.py (e.g. --resume, --overwrite, --minutes 1, --device cuda; --help lists them). Data
# parallel: torchrun --nproc_per_node=2 demo/train.py (see demo/README.md). The op benchmark is
# `python bench/ops_bench.py` (see bench/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. .venv/bin/activate
python demo/train.py "$@"
