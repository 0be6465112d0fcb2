"""`pip check` of the Flex Template image: any problem it reports fails (exit 1).

The image installs requirements/runtime.txt with --require-hashes and nothing with
--no-deps, so every declared dependency must be present at a compatible version,
the Beam SDK image's own packages included. Used by templates/Dockerfile and
tests/test_flex_template.py.
"""
import subprocess
import sys


def problems(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines()
            if line.strip() and line.strip() != "No broken requirements found."]


def main() -> int:
    result = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    bad = problems(result.stdout + result.stderr)
    for line in bad:
        print(line)
    print("pip check: " + ("OK" if not bad else f"{len(bad)} problem(s)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
