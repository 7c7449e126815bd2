"""Example Python task: parse a YAML document (with Debian's python3-yaml).

Body: {"yaml": "a: 1\\nb: [x, y]\\n"}  ->  result {"data": {...}, "keys": N}

Config:
    config: { module: yaml_task, path: [/usr/local/share/doc/taskmill/examples/python] }
"""
import taskmill
import yaml


def run(body, ctx):
    text = body.get("yaml")
    if not isinstance(text, str):
        raise taskmill.Reject("field 'yaml' must be a string")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        # bad input will not get better on a retry
        raise taskmill.Reject(f"not YAML: {e}")
    ctx.log("debug", f"attempt {ctx.attempt}: parsed {len(text)} bytes")
    keys = len(data) if isinstance(data, dict) else 0
    return {"data": data, "keys": keys}
