#!/usr/bin/env bash
# test_docs.sh - the repository stands alone: no file points at documents
# outside it (a ../shared folder, or the four design notes the docs were
# first written from), every relative link in README.md, HACKING.md and
# docs/*.md leads to a file that exists, every docs page a file names
# exists, and every page of docs/ is listed in the docs index.
# Needs no build: it reads the source tree only.
set -u
cd "${MT_SRC:-$(dirname "$0")/..}" || exit 2

fails=0 checks=0
ok() { checks=$((checks + 1)); }
bad() {
    checks=$((checks + 1))
    fails=$((fails + 1))
    echo "FAIL: $*" >&2
}
self=tests/test_docs.sh

# The files of the repository: tracked ones and new ones not yet added
# (ignored ones, such as build trees and node_modules, left out); without
# git, every file outside build trees, node_modules and .git.
list_files() {
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -z --cached --others --exclude-standard
    else
        find . \( -name .git -o -name node_modules -o -name 'build*' \) -prune -o -type f -print0 |
            sed -z 's|^\./||'
    fi
}
files=()
while IFS= read -r -d '' f; do
    case "$f" in
    */node_modules/* | node_modules/* | "$self") continue ;;
    esac
    [ -f "$f" ] && files+=("$f")
done < <(list_files)
[ ${#files[@]} -gt 50 ] && ok || bad "found only ${#files[@]} files under $PWD; run from the source tree"

# 1. Nothing refers to documents outside the repository.
outside='\.\./shared|shared/(DESIGN|KIMI-K3|ENGINE-REFERENCE|PEERS)|DESIGN\.md|KIMI-K3\.md|ENGINE-REFERENCE|PEERS\.md'
hits=$(printf '%s\0' "${files[@]}" | xargs -0 grep -n -I -E -- "$outside" 2>/dev/null)
if [ -z "$hits" ]; then
    ok
else
    while IFS= read -r line; do
        file=${line%%:*} rest=${line#*:}
        bad "$file:${rest%%:*}: refers to a document outside the repository" \
            "('$(echo "${rest#*:}" | sed 's/^[ *\/#]*//' | cut -c 1-100)');" \
            "point it at docs/design.md, docs/engine-reference.md or docs/kimi-k3.md instead"
    done <<<"$hits"
fi

# 2. Relative markdown links lead to files that exist. Inline links
# [text](target) and reference definitions [name]: target, outside fenced
# code blocks; web addresses and anchors within the page are not checked.
md_links() { # FILE -> "LINE TARGET" per link
    awk '
        /^[ \t]*```/ { fence = !fence; next }
        fence { next }
        {
            line = $0
            while (match(line, /\]\([^)[:space:]]+/)) {
                print NR, substr(line, RSTART + 2, RLENGTH - 2)
                line = substr(line, RSTART + RLENGTH)
            }
            if (match($0, /^[ \t]*\[[^]]+\]:[ \t]+[^ \t]+/)) {
                def = substr($0, RSTART, RLENGTH)
                sub(/^[ \t]*\[[^]]+\]:[ \t]+/, "", def)
                print NR, def
            }
        }' "$1"
}
pages=(README.md HACKING.md docs/*.md)
for md in "${pages[@]}"; do
    [ -f "$md" ] || {
        bad "$md is missing; it is one of the pages this repository must have"
        continue
    }
    dir=$(dirname "$md")
    while read -r ln target; do
        [ -n "$target" ] || continue
        case "$target" in
        http://* | https://* | mailto:* | \#*) continue ;;
        esac
        path=${target%%#*}
        path=${path%%\?*}
        [ -n "$path" ] || continue
        if [ -e "$dir/$path" ]; then ok; else
            bad "$md:$ln: the link '$target' leads to $dir/$path, which does not exist; fix the path or write the page"
        fi
    done < <(md_links "$md")
done

# 3. Every docs page that any file names (as docs/NAME.md) exists.
named=$(printf '%s\0' "${files[@]}" | xargs -0 grep -o -I -E -- 'docs/[A-Za-z0-9_.-]+\.md' 2>/dev/null |
    sort -u)
while IFS= read -r line; do
    [ -n "$line" ] || continue
    src=${line%%:*} page=${line#*:}
    if [ -f "$page" ]; then ok; else
        bad "$src names $page, which does not exist; fix the name or write the page"
    fi
done <<<"$named"

# 4. The index lists every page, and README.md leads to the index and HACKING.md.
for page in docs/*.md; do
    name=$(basename "$page")
    [ "$name" = README.md ] && continue
    grep -q "](\(\./\)\?$name)" docs/README.md 2>/dev/null && ok ||
        bad "docs/README.md does not link $name; add a line for it to the index"
done
for target in docs/README.md HACKING.md; do
    grep -q "]($target)" README.md && ok || bad "README.md does not link $target; add a link to it"
done

echo "$((checks - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
