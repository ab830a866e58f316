#!/usr/bin/env bash
# plot.sh — `pptrain plot` through the real binary, on two real runs (a few steps of
# configs/gpt-tiny.yaml on one process, learning rates 0.001 and 0.003, validating):
# the SVG of both renders with rsvg-convert (another renderer than pptrain's cairo) to
# a 960×600 PNG holding both runs' colours; the legend names each run in a row of its
# own: a run renamed (lr-0.001 -> lr-0.002: one digit, the same width in the font)
# changes only a glyph-sized box of the picture, the first run's box above the second's
# (cairo writes text into SVG as glyph outlines, so the names cannot be grepped: the
# picture itself is read, see [Note: testing the legend] below). pptrain's own PNG, --x
# tokens and --log-y draw too; one run goes to RUN_DIR/loss.svg by default. Bad input
# exits 2 naming the file (and line) and writes nothing, an old picture kept whole.
# val_losses.csv: a resumed run rewrites the rows after its checkpoint as they were; a
# fresh run removes a stale one. pptrain links no cairo (the plot module, dlopened: [Note:
# plot module loading] in src/plot/plot_load.c); a module that cannot be loaded, or one
# whose libcairo is missing, exits 2 saying what to do and writes nothing.
set -u
PPTRAIN=${PPTRAIN:-./pptrain}
PNGTOOL=${PNGTOOL:-build/cpu/test/pngtool}
tmp=$(mktemp -d /tmp/pptrain-plot.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib/check.sh" # ok, bad, check, skip, skip_all, finish
cfg=configs/gpt-tiny.yaml
has() { grep -qF -- "$2" "$1"; } # FILE TEXT
rows() { echo $(($(wc -l <"$1") - 1)); }

# the libraries cairo and fontconfig pull in, none of which a GPU machine may have
drawing_libs='libcairo|libfontconfig|libpixman|libfreetype|libpng|libxcb|libX11'
ldd "$PPTRAIN" >"$tmp/ldd.out" 2>&1
check "pptrain links none of cairo, fontconfig, pixman, freetype, png, xcb, X11" \
  '! grep -E "$drawing_libs" "$tmp/ldd.out"'
# the module's path, from --version's line "plot: libpptrain_plot.so (...): PATH"
module=$("$PPTRAIN" --version | sed -n 's/^plot: libpptrain_plot\.so .*: //p')
check "--version names the plot module, and it links cairo ($module)" \
  '[ -f "$module" ] && ldd "$module" | grep -q libcairo'

train() { # DIR LR [--set ...]: 24 steps on one process, a row every 2, validation every 8
  local dir=$1 lr=$2
  shift 2
  timeout 60 "$PPTRAIN" --config "$cfg" --set pipeline.stages=1 --set train.steps=24 \
    --set output.log_every=2 --set data.val_every=8 --set train.optimizer.lr="$lr" \
    --set train.lr_schedule.warmup_steps=4 --set output.checkpoint_final=false \
    --set "output.dir=$dir" "$@" >"$dir.out" 2>&1
}
a=$tmp/lr-0.001 b=$tmp/lr-0.003
train "$a" 0.001 && train "$b" 0.003
check "two runs of 24 steps: 12 loss rows and 3 validation rows each" \
  '[ "$(rows "$a/losses.csv")" = 12 ] && [ "$(rows "$b/val_losses.csv")" = 3 ] &&
   [ "$(sed -n 4p "$a/val_losses.csv" | cut -d, -f1)" = 24 ]'

"$PPTRAIN" plot "$a" "$b" --out "$tmp/two.svg" >"$tmp/two.out" 2>&1
check "plot of both: exit 0, says what it wrote and the tokens (512 per step)" \
  '[ $? -eq 0 ] && has "$tmp/two.out" "plot: wrote $tmp/two.svg" &&
   has "$tmp/two.out" "lr-0.001: 24 steps, 12288 tokens (512 per step), loss " &&
   has "$tmp/two.out" "lr-0.003: 24 steps"'

# render SVG PNG: rsvg-convert's picture of the SVG (its size and pixels)
render() { rsvg-convert "$1" -o "$2" 2>"$2.err"; }
# colours of the first two runs (the Okabe-Ito blue and vermillion, src/plot/plot_draw.c)
blue=0072b2 vermillion=d55e00
if ! command -v rsvg-convert >/dev/null; then
  skip "rsvg-convert not installed (scripts/install-deps installs librsvg2-bin): SVG not rendered"
elif [ ! -x "$PNGTOOL" ]; then
  skip "$PNGTOOL not built (make $PNGTOOL): pictures not read"
else
  render "$tmp/two.svg" "$tmp/two.png"
  check "the SVG renders with rsvg-convert to a 960x600 PNG ($(cat "$tmp/two.png.err"))" \
    '[ "$("$PNGTOOL" size "$tmp/two.png")" = "960 600" ]'
  nb=$("$PNGTOOL" count "$tmp/two.png" $blue) nv=$("$PNGTOOL" count "$tmp/two.png" $vermillion)
  check "both runs are drawn: $nb pixels of the first run's blue, $nv of the second's vermillion" \
    '[ "$nb" -gt 500 ] && [ "$nv" -gt 500 ]'

  # [Note: testing the legend] cairo's SVG holds text as glyph outlines (<use> of
  # <symbol> paths), not as <text>: a run's name is nowhere in it as characters. What
  # can be checked is the picture: render the same two runs with one run's directory
  # renamed by one digit. If the legend shows each run's name, exactly the pixels of
  # that digit change (digits are equally wide in the sans-serif fonts, so nothing
  # else moves), in the row of that run; if it did not, nothing would change; if
  # anything else depended on the name, more would.
  cp -r "$a" "$tmp/lr-0.002" && cp -r "$b" "$tmp/lr-0.004"
  "$PPTRAIN" plot "$tmp/lr-0.002" "$b" --out "$tmp/a2.svg" >/dev/null 2>&1 &&
    render "$tmp/a2.svg" "$tmp/a2.png"
  "$PPTRAIN" plot "$a" "$tmp/lr-0.004" --out "$tmp/b4.svg" >/dev/null 2>&1 &&
    render "$tmp/b4.svg" "$tmp/b4.png"
  read -r na ax0 ay0 ax1 ay1 <<<"$("$PNGTOOL" diff "$tmp/two.png" "$tmp/a2.png")"
  read -r nb bx0 by0 bx1 by1 <<<"$("$PNGTOOL" diff "$tmp/two.png" "$tmp/b4.png")"
  small() { [ "${1:-0}" -gt 0 ] && [ $(($4 - $2)) -lt 16 ] && [ $(($5 - $3)) -lt 16 ]; }
  label="the legend names the first run: lr-0.001 -> lr-0.002 changes $na pixels"
  check "$label, all in one glyph's box ($ax0,$ay0)-($ax1,$ay1)" \
    'small "$na" "$ax0" "$ay0" "$ax1" "$ay1"'
  label="the legend names the second run: lr-0.003 -> lr-0.004 changes $nb pixels"
  check "$label, all in one glyph's box ($bx0,$by0)-($bx1,$by1)" \
    'small "$nb" "$bx0" "$by0" "$bx1" "$by1"'
  check "... in rows of their own, the first run's above the second's, in one column" \
    '[ "${ay1:-0}" -lt "${by0:-0}" ] && [ $((ax0 - bx0)) -le 2 ] && [ $((bx0 - ax0)) -le 2 ]'

  "$PPTRAIN" plot "$a" "$b" --out "$tmp/own.png" >/dev/null 2>&1
  nb=$("$PNGTOOL" count "$tmp/own.png" $blue) nv=$("$PNGTOOL" count "$tmp/own.png" $vermillion)
  check "--out FILE.png: pptrain's own 960x600 PNG, both runs' colours ($nb, $nv pixels)" \
    '[ "$("$PNGTOOL" size "$tmp/own.png")" = "960 600" ] && [ "$nb" -gt 500 ] && [ "$nv" -gt 500 ]'
  "$PPTRAIN" plot "$a" "$b" --x tokens --log-y --no-lr --out "$tmp/tok.svg" >/dev/null 2>&1 &&
    render "$tmp/tok.svg" "$tmp/tok.png"
  check "--x tokens --log-y --no-lr: a picture too, another one" \
    '[ "$("$PNGTOOL" size "$tmp/tok.png")" = "960 600" ] &&
     [ "$("$PNGTOOL" diff "$tmp/two.png" "$tmp/tok.png" | cut -d" " -f1)" -gt 1000 ]'
fi
"$PPTRAIN" plot "$a" >"$tmp/one.out" 2>&1
check "one run without --out: RUN_DIR/loss.svg" \
  '[ $? -eq 0 ] && has "$tmp/one.out" "plot: wrote $a/loss.svg" && has "$a/loss.svg" "<svg"'

# ---- bad input: exit 2, the file (and line) named, nothing written ---------------------

echo old >"$tmp/keep.svg"
refused() { # LABEL TEXT ARGS...: plot ARGS --out keep.svg exits 2 saying TEXT, keep.svg whole
  local label=$1 text=$2 rc=0
  shift 2
  "$PPTRAIN" plot "$@" >"$tmp/refused.out" 2>&1 || rc=$?
  check "$label: exit 2 (rc $rc) saying \"$text\", nothing written" \
    '[ $rc -eq 2 ] && has "$tmp/refused.out" "$text" && [ "$(cat "$tmp/keep.svg")" = old ] &&
     [ -z "$(ls "$tmp" | grep "keep.svg.")" ]'
}
mkdir -p "$tmp/bad"
refused "a directory without losses.csv" "$tmp/bad: no losses.csv: not a run's output.dir" \
  "$a" "$tmp/bad" --out "$tmp/keep.svg"
refused "no such directory" "$tmp/none: No such file or directory" "$tmp/none" --out "$tmp/keep.svg"
: >"$tmp/bad/losses.csv"
refused "an empty losses.csv" "$tmp/bad/losses.csv: empty file (no header)" "$tmp/bad" \
  --out "$tmp/keep.svg"
head -n 1 "$a/losses.csv" >"$tmp/bad/losses.csv"
refused "a header only" "$tmp/bad/losses.csv: a header and no rows" "$tmp/bad" --out "$tmp/keep.svg"
{ head -n 3 "$a/losses.csv"; echo "6,5.1,0.0005,1.2"; } >"$tmp/bad/losses.csv"
refused "a short row" "$tmp/bad/losses.csv:4: 4 fields, the header has 6" "$tmp/bad" \
  --out "$tmp/keep.svg"
{ head -n 3 "$a/losses.csv"; echo "6,lots,0.0005,1.2,4000,100"; } >"$tmp/bad/losses.csv"
refused "a field not a number" "$tmp/bad/losses.csv:4: loss 'lots' is not a number" "$tmp/bad" \
  --out "$tmp/keep.svg"
cp "$a/losses.csv" "$tmp/bad/" && printf 'step,val_loss\n8,4.1\n4,4.0\n' >"$tmp/bad/val_losses.csv"
refused "val_losses.csv with steps going down" "$tmp/bad/val_losses.csv:3: step 4 after step 8" \
  "$tmp/bad" --out "$tmp/keep.svg"
refused "an unknown --out extension" "--out: the file name ends in .svg or .png: $tmp/keep.pdf" \
  "$a" --out "$tmp/keep.pdf"
check "... and no keep.pdf" '[ ! -e "$tmp/keep.pdf" ]'
refused "several runs without --out" "--out FILE.svg|FILE.png is needed with several runs" "$a" "$b"
refused "an unknown option" "unknown option --smooth" "$a" --smooth --out "$tmp/keep.svg"
refused "--x neither steps nor tokens" "--x is steps or tokens, not epochs" "$a" --x epochs
# the plot module missing, or its cairo: what a machine without them would see
PPTRAIN_PLOT_LIB=$tmp/none.so refused "PPTRAIN_PLOT_LIB naming no file" \
  "the plot module PPTRAIN_PLOT_LIB names, $tmp/none.so, cannot be read" "$a" --out "$tmp/keep.svg"
# a copy of the module that needs libcairx.so.2 where it needs libcairo.so.2 (one byte of
# its dynamic string table): the loader's error when libcairo is not installed
LC_ALL=C sed 's/libcairo\.so\.2/libcairx.so.2/' "$module" >"$tmp/nocairo.so"
if ! cmp -s "$module" "$tmp/nocairo.so"; then
  PPTRAIN_PLOT_LIB=$tmp/nocairo.so refused "the plot module without libcairo" \
    "cannot load the plot module $tmp/nocairo.so (libcairx.so.2: cannot open shared object" \
    "$a" --out "$tmp/keep.svg"
  check "... saying how to install it" 'has "$tmp/refused.out" "apt install libcairo2"'
  rm -f "$a/loss.svg"
  PPTRAIN_PLOT_LIB=$tmp/nocairo.so "$PPTRAIN" plot "$a" >/dev/null 2>&1
  check "... nor RUN_DIR/loss.svg without --out (exit $?)" '[ ! -e "$a/loss.svg" ]'
else
  skip "the plot module ($module) names no libcairo.so.2: a missing libcairo not simulated"
fi
rc=0
"$PPTRAIN" plot "$a" --out "$tmp/no-such-dir/x.svg" >"$tmp/nodir.out" 2>&1 || rc=$?
check "--out in a missing directory: exit 1 (an I/O error, rc $rc), saying so" \
  '[ $rc -eq 1 ] && has "$tmp/nodir.out" "writing $tmp/no-such-dir/x.svg failed"'

# ---- val_losses.csv through resume -----------------------------------------------------

c=$tmp/resumed
train "$c" 0.001 --set train.steps=8 --set data.val_every=2 --set output.checkpoint_every=4 \
  --set output.checkpoint_final=true
cp "$c/val_losses.csv" "$tmp/val-whole.csv"
train "$c" 0.001 --set train.steps=8 --set data.val_every=2 --set output.checkpoint_every=4 \
  --set output.checkpoint_final=true --resume "$c/checkpoints/step_0000004"
check "a run resumed at step 4 rewrites val_losses.csv's rows 6 and 8 as they were (4 rows)" \
  'has "$c.out" "resumed from" && cmp -s "$c/val_losses.csv" "$tmp/val-whole.csv" &&
   [ "$(rows "$c/val_losses.csv")" = 4 ]'
rm -rf "$c/checkpoints"
train "$c" 0.001 --set train.steps=2 --set data.val=null
check "a fresh run without validation removes a stale val_losses.csv" \
  '[ "$(rows "$c/losses.csv")" = 1 ] && [ ! -e "$c/val_losses.csv" ]'
# a diverged run's loss of 1e308: the summary prints 4 digits of it, not 300
mkdir -p "$tmp/huge" && printf 'step,loss\n1,5\n2,1e308\n' >"$tmp/huge/losses.csv"
"$PPTRAIN" plot "$tmp/huge" --out "$tmp/huge.svg" >"$tmp/huge.out" 2>&1 &&
  grep -q "loss 5.0000 -> 1e+308$" "$tmp/huge.out" && ok "a loss of 1e308 in the summary: 1e+308" ||
  bad "a loss of 1e308: $(tail -n 1 "$tmp/huge.out" | head -c 200)"
finish
