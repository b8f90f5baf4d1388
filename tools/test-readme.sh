#!/usr/bin/env bash
# The README's promises: every command block still runs (or says why it cannot run here), and every page of docs/
# is reachable from the README through relative links, whose anchors exist.
#
#   tools/test-readme.sh BUILD_DIR [--strict-links]     (ctest readme_commands)
#
# Each fenced block of README.md follows a marker line, `<!-- readme-test: KIND (why) -->`:
#   runs      run here: sh blocks from the source root (build/ is BUILD_DIR, HOME a scratch folder); cpp and c blocks
#             compiled against BUILD_DIR and run on 2 ranks with tbcoll-run; python blocks on 2 ranks with the
#             module of BUILD_DIR (skipped, saying so, where the build has no module). A block whose --model file is
#             missing is skipped, saying so.
#   builds    the cmake configure and build lines are tools/build.sh's (checked to be), the others run as above
#   hardware  needs what this machine lacks (a Mac, a second host): the repository paths it names must exist
#   ci        the top-level commands, which CI runs: they must exist and be executable
# A block without a marker fails the test. Links to pages that do not exist are reported; with --strict-links they
# fail the test (pages other branches bring may be missing until they merge).
# Prints one line per block and link check; exits non-zero on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: tools/test-readme.sh BUILD_DIR [--strict-links]" >&2; exit 2; }
build=$(cd "$1" && pwd)
strict=${2:-}
exec python3 - "$root" "$build" "$strict" <<'PYTHON'
import os, re, shutil, subprocess, sys, tempfile

root, build, strict = sys.argv[1], sys.argv[2], sys.argv[3] == "--strict-links"
readme = os.path.join(root, "README.md")
failures = []
scratch = tempfile.mkdtemp(prefix="readme-test-")
env = dict(os.environ, HOME=scratch)
env.pop("LD_LIBRARY_PATH", None)


# The build's own compilers and flags (a clang + libc++ build needs its C++ library for the C++ block).
cache = {}
for line in open(os.path.join(build, "CMakeCache.txt"), errors="replace"):
    match = re.match(r"^(CMAKE_(?:CXX|C)_(?:COMPILER|FLAGS)):[A-Z]+=(.*)$", line.rstrip("\n"))
    if match and match.group(2):
        cache[match.group(1)] = match.group(2)


def fail(what):
    failures.append(what)
    print("FAIL", what)


def blocks(path):
    """(line, marker, language, text) of every fenced block."""
    lines = open(path).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        marker = re.match(r"^<!-- readme-test: (\w+)", lines[j]) if j >= 0 else None
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        out.append((i + 1, marker.group(1) if marker else None, fence.group(1), "\n".join(lines[i + 1:end])))
        i = end + 1
    return out


def local(text):
    # build, as a path (build/...) or an argument (`cmake --install build`), is this test's build tree; the rest
    # runs as written.
    return re.sub(r"(?<![\w./~-])build(?![\w.-])", build, text)


def run(what, command, timeout=240, shell=False):
    try:
        done = subprocess.run(command, cwd=root, env=env, shell=shell, executable="/bin/bash" if shell else None,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, text=True)
    except subprocess.TimeoutExpired:
        return fail(f"{what}: still running after {timeout} s")
    if done.returncode != 0:
        print(done.stdout[-3000:])
        return fail(f"{what}: exit status {done.returncode}")
    print("PASS", what)


def missing_model(text):
    for model in re.findall(r"--model\s+(\S+)", text):
        if not os.path.isfile(os.path.join(root, model)):
            return model
    return None


def run_sh(where, text):
    model = missing_model(text)
    if model:
        return print(f"SKIP {where}: no model at {model} (tools/get-model.sh fetches it)")
    run(where, "set -euo pipefail\n" + local(text), shell=True)


def run_compiled(where, language, text):
    source = os.path.join(scratch, "block." + ("cc" if language == "cpp" else "c"))
    program = os.path.join(scratch, "block")
    open(source, "w").write(text + "\n")
    compiler = [cache.get("CMAKE_CXX_COMPILER", "c++"), "-std=c++17"] + cache.get("CMAKE_CXX_FLAGS", "").split() \
        if language == "cpp" else [cache.get("CMAKE_C_COMPILER", "cc"), "-std=c99"]
    run(f"{where}: compiles", compiler + ["-Wall", "-Werror", "-I", os.path.join(root, "include"), source, "-o",
                                          program, "-L", build, "-ltbcoll", "-Wl,-rpath," + build])
    for ranks in ("2", "3"):  # a snippet is right at any rank count, not only the one it was tried with
        if os.path.exists(program):
            run(f"{where}: runs on {ranks} ranks", [os.path.join(build, "tbcoll-run"), "-n", ranks, "--timeout", "120",
                                                    "--", program])


def run_python(where, text):
    module = os.path.join(build, "python")
    if not os.path.isdir(os.path.join(module, "tbcoll")):
        return print(f"SKIP {where}: this build has no Python module ({module})")
    script = os.path.join(scratch, "block.py")
    open(script, "w").write(text + "\n")
    for ranks in ("2", "3"):
        run(f"{where}: runs on {ranks} ranks", [os.path.join(build, "tbcoll-run"), "-n", ranks, "--timeout", "120",
                                                "-x", "PYTHONPATH=" + module, "--", "/usr/bin/python3", script])


def repository_paths_exist(where, text):
    for path in sorted(set(re.findall(r"(?<![\w./~-])((?:tools|benchmarks|examples)/[\w./-]+)", text))):
        if not os.path.exists(os.path.join(root, path)):
            fail(f"{where}: names {path}, which does not exist")
    print("PASS", f"{where}: the paths it names exist")


for line, marker, language, text in blocks(readme):
    where = f"README.md:{line} ({marker or 'no marker'}, {language or 'text'})"
    if marker is None:
        fail(f"{where}: a command block without a `<!-- readme-test: KIND -->` line before it")
    elif marker == "ci":
        for command in re.findall(r"^(\S+)", text, flags=re.M):
            if not os.access(os.path.join(root, command), os.X_OK):
                fail(f"{where}: {command} is not an executable of the repository")
        print("PASS", f"{where}: the commands exist")
    elif marker == "hardware":
        repository_paths_exist(where, text)
    elif marker == "builds":
        ours = open(os.path.join(root, "tools", "build.sh")).read()
        rest = []
        for command in text.split("\n"):
            if command.startswith("cmake -S") or command.startswith("cmake --build"):
                if "cmake -S . -B build" not in ours or "cmake --build build" not in ours:
                    fail(f"{where}: tools/build.sh no longer runs `{command}`'s configure and build")
            else:
                rest.append(command)
        run_sh(where, "\n".join(rest))
    elif marker == "runs":
        if language in ("sh", "bash", ""):
            run_sh(where, text)
        elif language in ("cpp", "c"):
            run_compiled(where, language, text)
        elif language == "python":
            run_python(where, text)
        else:
            fail(f"{where}: cannot run a {language} block")
    else:
        fail(f"{where}: unknown marker {marker} (runs, builds, hardware, ci)")


def slug(heading):
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    return {slug(h) for h in re.findall(r"^#+ (.*)$", open(path).read(), flags=re.M)}


# Every docs page reachable from the README; every relative link's page and anchor present.
seen, todo, broken = set(), [readme], []
while todo:
    page = todo.pop()
    if page in seen:
        continue
    seen.add(page)
    for target in re.findall(r"\]\(([^)\s]+)\)", open(page).read()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(page), path))
        if not os.path.exists(full):
            broken.append(f"{os.path.relpath(page, root)} links {target}, which does not exist")
            continue
        if anchor and full.endswith(".md") and anchor not in anchors(full):
            fail(f"{os.path.relpath(page, root)} links {target}: no such heading in {os.path.relpath(full, root)}")
        if full.endswith(".md"):
            todo.append(full)
for note in broken:
    (fail if strict else lambda what: print("NOTE", what))(note)
docs = os.path.join(root, "docs")
for name in sorted(os.listdir(docs)) if os.path.isdir(docs) else []:
    page = os.path.join(docs, name)
    if name.endswith(".md") and page not in seen:
        fail(f"docs/{name} is not reachable from README.md")
print(f"PASS every page of docs/ that exists is reachable from README.md ({len(seen) - 1} pages)")

shutil.rmtree(scratch, ignore_errors=True)
if failures:
    print(f"readme-test: FAIL ({len(failures)}):", *failures, sep="\n  ")
    sys.exit(1)
print("readme-test: PASS")
PYTHON
