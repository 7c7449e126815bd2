# pystubborn.py - task code that catches taskmill.Stopped (a bare
# `except:`) and keeps going; test_host_python_stopped.sh.
import time


def run(body, ctx):
    mode = body.get("mode")
    if mode == "sleepy":
        while True:
            try:
                time.sleep(0.01)
            except:  # noqa: E722 - the point of the test
                pass
    if mode == "busy":
        while True:
            try:
                while True:
                    pass
            except:  # noqa: E722
                pass
    if mode == "nested":
        while True:
            try:
                try:
                    while True:
                        pass
                except:  # noqa: E722
                    while True:
                        pass
            except:  # noqa: E722
                continue
            finally:
                pass
    return {"ok": True, "mode": mode}
