#!/usr/bin/env bash
# Systematic mutation run (docs/mutation.md): mutmut over the named modules, with the fast tier as its
# test command, in a scratch copy of the working tree so that mutmut's mutants/ directory and caches
# never land in the repository.
#
#   scripts/mutmut.sh SCRATCH MODULE.py [MODULE.py ...] -- TEST [TEST ...]
#
# mutmut is not a project dependency: put it in a venv of its own that can also see the project's
# packages, and name that venv's python in MUTMUT_PYTHON (default: python3 on PATH). MUTMUT_CHILDREN sets
# the parallel workers (default 1). Afterwards `cd SCRATCH && $MUTMUT_PYTHON -m mutmut results --all true`
# lists every mutant and `... -m mutmut show NAME` prints one as a diff.
set -euo pipefail

scratch=$1; shift
modules=(); tests=()
while [[ $# -gt 0 && $1 != -- ]]; do modules+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
tests=("$@")
[[ ${#modules[@]} -gt 0 && ${#tests[@]} -gt 0 ]] || { sed -n 2,12p "$0"; exit 2; }
python=${MUTMUT_PYTHON:-python3}
repo=$(cd "$(dirname "$0")/.." && pwd)

rm -rf "$scratch" && mkdir -p "$scratch"
# the working tree as it is, tracked and new files alike (not what .gitignore ignores)
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$scratch")

{
  echo "[mutmut]"
  echo "source_paths ="
  printf '    %s\n' orchestrator storage tasks
  echo "only_mutate ="
  printf '    %s\n' "${modules[@]}"
  echo "also_copy ="
  printf '    %s\n' .ci DESIGN.md README.md docs examples docker scripts bench Makefile Procfile
  echo "pytest_add_cli_args_test_selection ="
  printf '    %s\n' "${tests[@]}"
  echo "pytest_add_cli_args ="
  # these read the source files themselves, which mutmut rewrites (every function becomes a trampoline)
  printf '    %s\n' -p no:cacheprovider --ignore=tests/unit/test_mutants_catalogue.py
  echo "use_git_change_detection = false"
} > "$scratch/setup.cfg"

cd "$scratch"
# mutmut imports the mutated copy from mutants/: nothing may put the original tree first
unset PYTHONPATH
"$python" -m mutmut run --max-children "${MUTMUT_CHILDREN:-1}"
"$python" -m mutmut results
# per module: mutants, killed, survived, no tests (no test of the selection runs the mutated function), timeout
"$python" - <<'PY'
import glob, json
names = {1: "killed", 0: "survived", 33: "no tests", 36: "timeout", -24: "timeout", 152: "timeout"}
for meta in sorted(glob.glob("mutants/**/*.py.meta", recursive=True)):
    codes = json.load(open(meta))["exit_code_by_key"].values()
    counts = {n: sum(names.get(c, "other") == n for c in codes) for n in ("killed", "survived", "no tests", "timeout")}
    print(meta[len("mutants/"):-len(".meta")], len(codes), *(f"{n}={v}" for n, v in counts.items()))
PY
