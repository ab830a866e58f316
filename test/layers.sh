#!/usr/bin/env bash
# layers.sh — the source tree's structure as the README's layout section states it: no
# circle between src/'s folders (each folder, and each file at the top of src/, is one
# node; an #include is an edge), a header named *_internal.h included only from its own
# folder, and src/ never including from cuda/. Needs only the tree (tsort decides the
# circles). Run by make test from the repository root.
set -uo pipefail
. test/lib/check.sh
cd src || exit 1

# node FILE: the folder of FILE, or the stem of a file at the top of src/
node() { case $1 in */*) echo "${1%%/*}" ;; *) f=${1%.*}; echo "$f" ;; esac; }

edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
private_bad= cuda_bad=
while IFS= read -r file; do
    dir=$(dirname "$file")
    while IFS= read -r inc; do
        if [ -e "$dir/$inc" ] && [ "$dir" != . ]; then target="$dir/$inc"
        elif [ -e "$inc" ]; then target=$inc
        else
            [ ! -e "../cuda/$inc" ] || cuda_bad="$cuda_bad $file:$inc"
            continue
        fi
        target=${target#./}
        a=$(node "$file") b=$(node "$target")
        case $target in
        *_internal.h) [ "$(dirname "$target")" = "$dir" ] || private_bad="$private_bad $file:$target" ;;
        esac
        [ "$a" = "$b" ] || echo "$b $a" >>"$edges"
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
done < <(find . -name '*.[ch]' | sed 's|^\./||' | sort)

check "the includes between folders were read ($(sort -u "$edges" | wc -l) edges)" '[ -s "$edges" ]'
loop=$(sort -u "$edges" | tsort 2>&1 >/dev/null)
check "no circle between folders${loop:+: $(echo "$loop" | tr '\n' ' ')}" '[ -z "$loop" ]'
check "*_internal.h only from its own folder${private_bad:+:$private_bad}" '[ -z "$private_bad" ]'
check "src/ includes nothing from cuda/${cuda_bad:+:$cuda_bad}" '[ -z "$cuda_bad" ]'

# the check itself: a circle made here is found
echo "model runtime" >>"$edges"; echo "runtime model" >>"$edges"
check "a circle is found (the check can fail)" '! sort -u "$edges" | tsort >/dev/null 2>&1'
finish
