#!/usr/bin/env bash
# Stage this working tree for a remote GPU machine that receives a copy of its tracked and untracked-not-ignored
# files, small enough to send (LIMIT_MB, 64 MiB by default), and put it back after (docs/results/babylm.md). The bundled models' weights (about 84 MB, read by no GPU benchmark) leave the index for the
# call; the shared data the scripts read is copied into shared/data (all of the Wikipedia extract and BLiMP-dev, as
# many Gutenberg books as GUTENBERG_MB allows); litgpt's wheels are fetched into .whl when missing (.whl is
# git-ignored: send it with the copy).
#   bash benchmarks/gpu_stage.sh in      # then, on the GPU machine, e.g. OUT=DIR bash benchmarks/gpu_babylm.sh
#   bash benchmarks/gpu_stage.sh out     # always, before committing: the weights return to the index
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared/data}
LIMIT_MB=${LIMIT_MB:-64}
GUTENBERG_MB=${GUTENBERG_MB:-22}
EXCLUDE=.git/info/exclude
BEGIN="# gpu_stage.sh: begin" END="# gpu_stage.sh: end"

carried_bytes() {  # what the copy holds: tracked files, untracked files git does not ignore, and shared/ (ignored)
  git ls-files -z --cached --others --exclude-standard -- . ':!shared' | xargs -0 -r stat -c %s 2>/dev/null \
    | awk -v shared="$(du -sb shared | cut -f1)" '{s += $1} END {print s + shared}'
}

case "${1:-}" in
  in)
    if grep -qF "$BEGIN" "$EXCLUDE" 2>/dev/null; then echo "gpu_stage.sh: already staged (run 'out' first)" >&2; exit 2; fi
    if [ -e shared ]; then echo "gpu_stage.sh: ./shared exists; this script copies the data there and removes it after" >&2; exit 2; fi
    git rm -q --cached --ignore-unmatch src/maskplay/assets/*/model.safetensors
    printf '%s\n' "$BEGIN" "/src/maskplay/assets/*/model.safetensors" "$END" >> "$EXCLUDE"
    mkdir -p shared/data/gutenberg-subset
    cp -r "$SHARED/enwiki-wikiextractor" "$SHARED/blimp-dev" shared/data/
    budget=$((GUTENBERG_MB * 1024 * 1024)) used=0 books=0
    for f in "$SHARED"/gutenberg-subset/*.txt.gz; do
      size=$(stat -c %s "$f")
      [ $((used + size)) -gt "$budget" ] && break
      cp "$f" shared/data/gutenberg-subset/ && used=$((used + size)) books=$((books + 1))
    done
    [ -d .whl ] || bash benchmarks/gpu_wheels.sh > /dev/null
    bytes=$(( $(carried_bytes) + $(du -sb .whl | cut -f1) ))
    echo "staged: $books Gutenberg books ($((used / 1048576)) MiB); the copy holds $((bytes / 1048576)) MiB" \
      "with .whl (git-ignored: send it with the copy); limit $LIMIT_MB MiB"
    if [ "$bytes" -gt $((LIMIT_MB * 1048576)) ]; then
      echo "gpu_stage.sh: over the limit: lower GUTENBERG_MB or leave out more ('out' undoes this)" >&2; exit 1
    fi
    ;;
  out)
    git reset -q -- src/maskplay/assets
    if [ -f "$EXCLUDE" ]; then
      sed -i "/^$BEGIN\$/,/^$END\$/d" "$EXCLUDE"
    fi
    rm -rf shared/data/enwiki-wikiextractor shared/data/blimp-dev shared/data/gutenberg-subset
    rmdir shared/data shared 2>/dev/null || echo "gpu_stage.sh: ./shared holds more than this script put there; left as is" >&2
    git status --short | head -5
    ;;
  *)
    echo "usage: bash benchmarks/gpu_stage.sh in|out" >&2; exit 2 ;;
esac
