#!/usr/bin/python3
"""Renders conversations with a model's real Jinja chat template, the way the model's own
tokenizer config does (trim_blocks, lstrip_blocks, raise_exception), for the server's
template tests. Usage: render_chat_template.py TEMPLATE CASES.json
CASES.json: [{"messages": [...], "add_generation_prompt": bool, "bos": str, "eos": str,
              "tools": [...] (optional; absent = the variable is undefined)}, ...]
Prints a JSON list: {"text": rendered} or {"error": message} per case."""
import json
import sys

import jinja2
import jinja2.sandbox


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        source = f.read()
    with open(sys.argv[2], encoding="utf-8") as f:
        cases = json.load(f)
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(source)
    out = []
    for case in cases:
        try:
            extra = {"tools": case["tools"]} if "tools" in case else {}
            text = template.render(messages=case["messages"],
                                   add_generation_prompt=case["add_generation_prompt"],
                                   bos_token=case["bos"], eos_token=case["eos"], **extra)
            out.append({"text": text})
        except jinja2.exceptions.TemplateError as e:
            out.append({"error": str(e)})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
