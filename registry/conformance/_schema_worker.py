"""Evaluates JSON Schemas supplied by an environment, in a throwaway interpreter.

Run as a script (`python -I _schema_worker.py`), never imported: an
environment controls both its schemas and its observations, so a pattern
with catastrophic backtracking or a deeply recursive schema could otherwise
pin the probing worker. The parent enforces a wall-clock timeout; here CPU
time and memory are capped as well. No schema may load anything: the
registry is empty, so a remote $ref is an error, not a fetch.

stdin:  {"tasks": [{"id": str, "op": "validate", "schema": {...}, "instances": [...]}, ...]}
stdout: {id: {"results": [[error, ...] per instance]} | {"failed": str}}
"""

import json
import sys

MAX_INPUT_BYTES = 16 * 1024 * 1024
MAX_ERRORS = 10


def _limit_resources():
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (5, 6))
        if sys.platform == "linux":
            resource.setrlimit(resource.RLIMIT_AS, (1024 * 1024 * 1024,) * 2)
    except (ImportError, ValueError, OSError):
        pass  # the parent's wall-clock timeout still applies


def _error_line(error):
    where = "/".join(str(p) for p in error.absolute_path) or "/"
    return f"{where}: {error.message}"[:300]


def main():
    _limit_resources()
    raw = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    if len(raw) > MAX_INPUT_BYTES:
        sys.stdout.write(json.dumps({"*": {"failed": "input exceeds the schema worker's size budget"}}))
        return
    from jsonschema import Draft202012Validator
    from referencing import Registry

    out = {}
    for task in json.loads(raw)["tasks"]:
        try:
            validator = Draft202012Validator(task["schema"], registry=Registry())
            results = []
            for instance in task["instances"]:
                errors = []
                for error in validator.iter_errors(instance):
                    errors.append(_error_line(error))
                    if len(errors) >= MAX_ERRORS:
                        break
                results.append(errors)
            out[task["id"]] = {"results": results}
        except RecursionError:
            out[task["id"]] = {"failed": "the schema is nested or recursive beyond evaluation"}
        except Exception as exc:  # noqa: BLE001 - any failure is reported to the parent as evidence
            out[task["id"]] = {"failed": f"{type(exc).__name__}: {exc}"[:300]}
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
