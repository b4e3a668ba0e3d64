#!/usr/bin/env python3
"""Lists every command-line flag of a Megatron-LM checkout, with its choices.

    python3 scripts/megatron_argument_names.py /path/to/Megatron-LM > tests/data/megatron_core_v0.19.0_arguments.txt

Runs the release's own add_megatron_arguments (megatron/training/arguments.py),
which also builds arguments from its config dataclasses, so the list is what
that release's pretrain_gpt.py accepts. Needs torch; a few optional GPU-only
imports (triton kernels) are stubbed, and Python < 3.12 gets typing.override.
Output: one "--flag" per line, "--flag a,b,c" where the parser restricts the
choices. tests/unit/test_export.cpp checks `planner export --to megatron`
against the file this wrote.
"""
import argparse
import importlib.abc
import importlib.machinery
import sys
import typing
from unittest import mock

if not hasattr(typing, "override"):  # Python 3.11: Megatron uses typing.override (3.12)
    typing.override = lambda f: f

# Modules that import triton at load time; argument parsing never calls them.
STUB = {"megatron.core.transformer.moe.ops.paged_stash"}


class _Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        return importlib.machinery.ModuleSpec(name, self, is_package=True) if name in STUB else None

    def create_module(self, spec):
        m = mock.MagicMock(name=spec.name)
        m.__path__, m.__spec__, m.__name__ = [], spec, spec.name
        return m

    def exec_module(self, module):
        pass


def main():
    sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")
    sys.meta_path.insert(0, _Stub())
    from megatron.training.arguments import add_megatron_arguments

    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_megatron_arguments(parser)
    for action in parser._actions:
        for option in action.option_strings:
            if not option.startswith("--"):
                continue
            choices = ""
            if action.choices is not None:
                choices = " " + ",".join(str(c) for c in action.choices)
            print(option + choices)


if __name__ == "__main__":
    main()
