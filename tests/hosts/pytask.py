"""Test task for the Python host: the body's "mode" picks the behaviour."""
import ctypes

import taskmill
import yaml

VERSION = 1


def run(body, ctx):
    mode = body.get("mode")
    if mode == "ok":
        return {"ok": True, "id": ctx.id, "attempt": ctx.attempt,
                "has_deadline": ctx.deadline_ms > 0,
                "stop": ctx.should_stop()}
    if mode == "echo":
        return body["value"]
    if mode == "none":
        return None
    if mode == "error":
        raise ValueError("something broke")
    if mode == "reject":
        raise taskmill.Reject("bad input")
    if mode == "invalid":
        return {"f": object()}
    if mode == "loop":
        n = 0
        while True:
            n += 1
    if mode == "catching":
        while True:
            try:
                while True:
                    pass
            except Exception:
                pass
    if mode == "crash":
        ctypes.string_at(0)
    if mode == "yaml":
        return yaml.safe_load(body["text"])
    if mode == "log":
        ctx.log("warning", "hello from python")
        return None
    if mode == "version":
        ctx.log("info", f"module version {VERSION}")
        return {"version": VERSION}
    raise taskmill.Reject("unknown mode")
