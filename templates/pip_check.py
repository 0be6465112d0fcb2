"""`pip check`, except for the dependencies that requirements/no-deps.txt leaves out on purpose.

Packages in no-deps.txt are installed with --no-deps because some of their
declared dependencies must not be installed (the file says why). pip check
reports those as missing; any other problem fails (exit 1). Used by
templates/Dockerfile and tests/test_flex_template.py.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NO_DEPS = os.path.join(HERE, "..", "requirements", "no-deps.txt")


def no_deps_packages(path: str = NO_DEPS) -> set[str]:
    if not os.path.exists(path):
        return set()
    names = set()
    for line in open(path):
        line = line.split("#")[0].strip()
        if line:
            names.add(re.split(r"[=<>!~\[ ]", line)[0].lower().replace("_", "-"))
    return names


def problems(output: str, allowed: set[str]) -> list[str]:
    bad = []
    for line in output.splitlines():
        line = line.strip()
        if not line or line == "No broken requirements found.":
            continue
        match = re.match(r"^(\S+) \S+ requires \S+, which is not installed\.$", line)
        if match and match.group(1).lower().replace("_", "-") in allowed:
            continue
        bad.append(line)
    return bad


def main() -> int:
    result = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    bad = problems(result.stdout + result.stderr, no_deps_packages())
    for line in bad:
        print(line)
    print("pip check: " + ("OK" if not bad else f"{len(bad)} problem(s)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
