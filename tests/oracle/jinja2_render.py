"""Renders chat templates with Python Jinja2 configured as Hugging Face transformers does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, HF's tojson,
raise_exception and strftime_now). Optional second oracle for tests/oracle/template_diff.mjs
(--python): only used when python3 with jinja2 is installed; not needed by `make test`.

stdin: JSON lines {"template": str, "context": object}; stdout: JSON lines {"out": str} or
{"error": str}, one per input line, in order."""
import json
import sys
from datetime import datetime

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    compiled = {}
    for line in sys.stdin:
        req = json.loads(line)
        try:
            t = compiled.get(req["template"])
            if t is None:
                t = compiled[req["template"]] = env.from_string(req["template"])
            res = {"out": t.render(**req["context"])}
        except Exception as e:  # any failure is an expected "must refuse" outcome
            res = {"error": repr(e)}
        sys.stdout.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
