"""The Lambda runtime of the rehearsal image (a test tool, not shipped): what the python3.11
runtime does for one invocation, in the form moto's docker execution calls it:

    docker run <image> <handler> <event as JSON>     (moto mounts the function's zip at /var/task)

It imports ``handler`` (``app.deliveries_worker``) from /var/task with a clean interpreter:
sys.path is /var/task, the standard library and /var/runtime (boto3, as the Lambda runtime
provides it) and nothing else; bytecode writing is off, as on Lambda's read-only /var/task.
It sets the environment Lambda sets besides the function's own (region, task root, log
names; ``_X_AMZN_TRACE_ID`` when the function's tracing mode is Active, unsampled, since no
X-Ray daemon listens here), calls the handler with the event and a context object, and
prints the result as the last line of stdout, which moto returns as the invocation's payload.
An exception prints Lambda's error document and exits 1 (moto: a function error).
"""
import json
import os
import sys
import time
import traceback
import uuid

TASK_ROOT = "/var/task"
RUNTIME_DIR = "/var/runtime"


class Context:
    """The attributes and method of Lambda's context object that handlers use."""

    def __init__(self, name: str, timeout: float, memory: str, region: str):
        self.function_name = name
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.invoked_function_arn = f"arn:aws:lambda:{region}:123456789012:function:{name}"
        self.memory_limit_in_mb = memory
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{name}"
        self.log_stream_name = time.strftime("%Y/%m/%d/[$LATEST]") + uuid.uuid4().hex
        self.identity = None
        self.client_context = None
        self._deadline = time.monotonic() + timeout

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _clean_path() -> None:
    stdlib = [p for p in sys.path if p.startswith(sys.base_prefix) and "-packages" not in p]
    sys.path[:] = [TASK_ROOT] + stdlib + [RUNTIME_DIR]
    sys.dont_write_bytecode = True


def _tracing_active(name: str) -> bool:
    """Lambda's control plane knows the function's tracing mode; here it is moto's."""
    try:
        import boto3

        config = boto3.client("lambda").get_function_configuration(FunctionName=name)
        return config.get("TracingConfig", {}).get("Mode") == "Active"
    except Exception:  # noqa: BLE001  (no tracing then, as with PassThrough)
        return False


def _lambda_environment(name: str) -> None:
    region = os.environ.get("AWS_REGION", "us-east-1")
    os.environ.setdefault("AWS_DEFAULT_REGION", region)
    os.environ.update({"LAMBDA_TASK_ROOT": TASK_ROOT, "LAMBDA_RUNTIME_DIR": RUNTIME_DIR,
                       "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}", "TZ": ":UTC",
                       "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001"})
    if _tracing_active(name):
        now = int(time.time())
        os.environ["_X_AMZN_TRACE_ID"] = (f"Root=1-{now:08x}-{uuid.uuid4().hex[:24]};"
                                          f"Parent={uuid.uuid4().hex[:16]};Sampled=0")


def main(argv: list) -> int:
    handler_name = argv[1]
    event = json.loads(argv[2]) if len(argv) > 2 else {}
    name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "function")
    _clean_path()
    _lambda_environment(name)
    os.chdir(TASK_ROOT)
    context = Context(name, float(os.environ.get("AWS_LAMBDA_FUNCTION_TIMEOUT", "3")),
                      os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"),
                      os.environ["AWS_DEFAULT_REGION"])
    module_name, _, function_name = handler_name.rpartition(".")
    try:
        module = __import__(module_name, fromlist=[function_name])
        result = getattr(module, function_name)(event, context)
        payload, code = json.dumps(result), 0
    except Exception as exc:  # noqa: BLE001  (reported as Lambda reports it)
        payload = json.dumps({"errorMessage": str(exc), "errorType": type(exc).__name__,
                              "stackTrace": traceback.format_tb(exc.__traceback__)})
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    sys.stdout.write("\n" + payload + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
