"""Loaded at start-up by every Python process dev/bridge_gpu.sh starts (this folder is first on
PYTHONPATH): the driver, torchrun and its workers, the rendered import and export scripts. What it
changes, only where the machine lacks Transformer Engine, and only when the module is imported:

- `AutoBridge.to_megatron_provider` returns a provider with megatron-core's local layer spec and
  the TE/Apex fusions off (bridge_gpu_recipe.without_te): the HF -> Megatron import
  (AutoBridge.import_ckpt) builds its provider that way, else with TE's layer spec;
- with BRIDGE_GPU_TE_STANDIN=DIR (CPU hosts with Bridge 0.3.1, whose peft/lora_layers.py imports
  transformer_engine unconditionally): before `megatron.bridge` loads, tests/stages/bridge_cpu.py
  (in DIR) is imported, which installs its import stand-in for that one module and removes it;
- on Python 3.11 (CPU hosts running the GPU machine's Bridge nano-v3 source), `typing.override`.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import typing


class _Hook(importlib.abc.MetaPathFinder):
    """Runs `after(module)` once `name` has executed; `instead()` (returning the loaded module)
    replaces the normal load when given."""

    def __init__(self, name, after=None, instead=None):
        self.name, self.after, self.instead = name, after, instead

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        if self.instead is not None:
            return importlib.machinery.ModuleSpec(fullname, _Instead(self.instead), is_package=True)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run, after = spec.loader.exec_module, self.after

        def exec_module(module):
            run(module)
            after(module)

        spec.loader.exec_module = exec_module
        return spec


class _Instead(importlib.abc.Loader):
    def __init__(self, load):
        self.load = load

    def create_module(self, spec):
        module = self.load()
        spec.submodule_search_locations = module.__spec__.submodule_search_locations
        return module

    def exec_module(self, module):
        pass


def _patch_auto_bridge(module):
    from bridge_gpu_recipe import without_te

    plain = module.AutoBridge.to_megatron_provider

    def to_megatron_provider(self, *args, **kwargs):
        return without_te(plain(self, *args, **kwargs))

    module.AutoBridge.to_megatron_provider = to_megatron_provider


def _bridge_with_standin():
    sys.path.insert(0, os.environ["BRIDGE_GPU_TE_STANDIN"])
    import bridge_cpu  # noqa: F401  (imports megatron.core, then megatron.bridge beside the stand-in)

    return sys.modules["megatron.bridge"]


if not hasattr(typing, "override"):   # Python 3.11 running Bridge nano-v3, which uses 3.12's decorator
    typing.override = lambda f: f
if importlib.util.find_spec("transformer_engine") is None:
    sys.meta_path.insert(0, _Hook("megatron.bridge.models.conversion.auto_bridge", after=_patch_auto_bridge))
    if os.environ.get("BRIDGE_GPU_TE_STANDIN"):
        sys.meta_path.insert(0, _Hook("megatron.bridge", instead=_bridge_with_standin))
