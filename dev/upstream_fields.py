"""Write stages/backends/megatron/upstream_fields.yaml: the config fields each supported Megatron-Bridge and
NeMo RL version accepts, read from their sources at a named commit (no import, no GPU).

Run once per new version, commit the script and its output together:

    python dev/upstream_fields.py BRIDGE_GIT_DIR MEGATRON_LM_GIT_DIR NEMO_RL_GIT_DIR

Each *_GIT_DIR is a clone (bare is fine) of github.com/NVIDIA-NeMo/Megatron-Bridge,
github.com/NVIDIA/Megatron-LM and github.com/NVIDIA-NeMo/RL. Bridge's Megatron-LM commit is read
from its `3rdparty/Megatron-LM` submodule entry at the same Bridge commit. A class's fields are its
annotated class-body names plus those of its bases (dataclasses and TypedDicts alike), bases
followed through the modules' `from … import …` lines. Why: Bridge's override loader skips an
unknown key with a log line, so we check every key against these sets before submit.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import yaml

# Bridge versions we render for: name -> (git rev, recipe functions). "nano-v3" is the branch the
# nemo:25.11.nemotron_3_nano image carries; 0.3.1 is the newest Bridge that installs on Python 3.11.
BRIDGE = {
    "nano-v3": ("1cedb0a9c5f79d2cd2b5226a86b794b9f0e048a8",
                {"pretrain": "megatron.bridge.recipes.nemotronh.nemotron_3_nano:nemotron_3_nano_pretrain_config",
                 "sft": "megatron.bridge.recipes.nemotronh.nemotron_3_nano:nemotron_3_nano_finetune_config"}),
    "0.3.1": ("v0.3.1",
              {"pretrain": "megatron.bridge.recipes.nemotronh.nemotron_3_nano:nemotron_3_nano_pretrain_config",
               "sft": "megatron.bridge.recipes.nemotronh.nemotron_3_nano:nemotron_3_nano_sft_config"}),
}
# ConfigContainer section -> the class the Nemotron-3-Nano recipe puts there.
SECTIONS = {
    "model": "megatron.bridge.models.nemotronh:Nemotron3NanoProvider",
    "train": "megatron.bridge.training.config:TrainingConfig",
    "validation": "megatron.bridge.training.config:ValidationConfig",
    "optimizer": "megatron.bridge.training.config:OptimizerConfig",
    "scheduler": "megatron.bridge.training.config:SchedulerConfig",
    "checkpoint": "megatron.bridge.training.config:CheckpointConfig",
    "logger": "megatron.bridge.training.config:LoggerConfig",
    "tokenizer": "megatron.bridge.training.config:TokenizerConfig",
    "rng": "megatron.bridge.training.config:RNGConfig",
    "dataset/pretrain": "megatron.bridge.training.config:GPTDatasetConfig",
    "dataset/sft": "megatron.bridge.training.config:FinetuningDatasetConfig",
    "packed_sequence_specs": "megatron.bridge.data.datasets.packed_sequence:PackedSequenceSpecs",
    "config_container": "megatron.bridge.training.config:ConfigContainer",
}
# NeMo RL: version -> (git rev, {driver config: (MasterConfig class, parent YAML in the image)}).
# Fields typed as a base TypedDict whose subclass the config actually holds (policy.generation is a
# GenerationConfig, and with the vLLM backend a VllmConfig): the subclass's keys are added there.
NEMO_RL_SUBCLASSES = {"policy.generation": "nemo_rl.models.generation.vllm.config:VllmConfig"}
NEMO_RL = {
    # The branch the nemo-rl:v0.4.0.nemotron_3_nano image was cut from (it is not tag v0.4.0: the two
    # share history only up to 7536be361); 0.4.0 stays for comparison.
    "nano-v3": ("nano-v3", {
        "grpo": ("nemo_rl.algorithms.grpo:MasterConfig", "examples/configs/grpo_math_1B.yaml"),
        "dpo": ("nemo_rl.algorithms.dpo:MasterConfig", "examples/configs/dpo.yaml"),
        "rm": ("nemo_rl.algorithms.rm:MasterConfig", "examples/configs/rm.yaml"),
    }),
    "0.4.0": ("v0.4.0", {
        "grpo": ("nemo_rl.algorithms.grpo:MasterConfig", "examples/configs/grpo_math_1B.yaml"),
        "dpo": ("nemo_rl.algorithms.dpo:MasterConfig", "examples/configs/dpo.yaml"),
        "rm": ("nemo_rl.algorithms.rm:MasterConfig", "examples/configs/rm.yaml"),
    }),
}


class Source:
    """Python modules of one git tree at one commit, parsed on demand."""

    def __init__(self, git_dir: str, rev: str, roots: dict[str, str]):
        self.git_dir, self.rev, self.roots = git_dir, rev, roots   # roots: top package -> folder in the tree
        self.commit = self.git("rev-parse", f"{rev}^{{commit}}").strip()
        self.files = set(self.git("ls-tree", "-r", "--name-only", self.commit).split())
        self.parsed: dict[str, ast.Module | None] = {}

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "--git-dir", self.git_dir, *args], check=True, capture_output=True, text=True).stdout

    def module(self, name: str) -> ast.Module | None:
        if name not in self.parsed:
            top = name.split(".")[0]
            base = self.roots.get(top)
            path = None
            if base is not None:
                stem = f"{base}{name.replace('.', '/')}"
                for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
                    if candidate in self.files:
                        path = candidate
            self.parsed[name] = ast.parse(self.git("show", f"{self.commit}:{path}")) if path else None
        return self.parsed[name]


class Resolver:
    def __init__(self, sources: list[Source]):
        self.sources = sources

    def module(self, name: str) -> ast.Module | None:
        for s in self.sources:
            m = s.module(name)
            if m is not None:
                return m
        return None

    def find_class(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
        tree = self.module(module)
        if tree is None or depth > 8:
            return None
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return module, node
        target = self.imported(module, tree, name)
        return self.find_class(*target, depth + 1) if target else None

    def imported(self, module: str, tree: ast.Module, name: str) -> tuple[str, str] | None:
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        src = node.module or ""
                        if node.level:
                            parts = module.split(".")
                            is_pkg = self.is_package(module)
                            parent = parts[:len(parts) - node.level + (1 if is_pkg else 0)]
                            src = ".".join(parent + ([node.module] if node.module else []))
                        return src, alias.name
        return None

    def is_package(self, module: str) -> bool:
        for s in self.sources:
            base = s.roots.get(module.split(".")[0])
            if base is not None and f"{base}{module.replace('.', '/')}/__init__.py" in s.files:
                return True
        return False

    def fields(self, spec: str) -> dict[str, ast.expr]:
        """Annotated names of the class and its bases (bases first, as dataclasses order them)."""
        module, name = spec.split(":")
        found = self.find_class(module, name)
        if found is None:
            return {}
        mod, cls = found
        out: dict[str, ast.expr] = {}
        for base in cls.bases:
            base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if base_name:
                out.update(self.fields(f"{mod}:{base_name}") if self.find_class(mod, base_name) else {})
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                out[node.target.id] = node.annotation
        return out

    def exists(self, spec: str) -> bool:
        module, name = spec.split(":")
        tree = self.module(module)
        return tree is not None and any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name for n in tree.body)

    def tree(self, spec: str, seen: tuple = ()) -> dict:
        """TypedDict/dataclass fields, nested: {field: subtree, or its annotation's source text}."""
        module, name = spec.split(":")
        found = self.find_class(module, name)
        out = {}
        for key, ann in self.fields(spec).items():
            sub = None
            text = ast.unparse(ann)
            for n in ast.walk(ann):
                ref = n.id if isinstance(n, ast.Name) else n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else None
                if ref and found and ref not in seen:
                    inner = self.find_class(found[0], ref)
                    if inner and self.fields(f"{inner[0]}:{ref}"):
                        sub = {**(sub or {}), **self.tree(f"{inner[0]}:{ref}", seen + (name,))}
            out[key] = sub or text
        return out


def paths(tree: dict, prefix: str = "") -> dict[str, str | None]:
    """{dotted key: annotation source for a leaf, None for a nested mapping}."""
    out: dict[str, str | None] = {}
    for key, sub in tree.items():
        if isinstance(sub, dict):
            out[prefix + key] = None
            out.update(paths(sub, f"{prefix}{key}."))
        else:
            out[prefix + key] = sub
    return out


def main(bridge_dir: str, megatron_dir: str, rl_dir: str) -> None:
    out: dict = {"generated_by": "dev/upstream_fields.py", "megatron_bridge": {}, "nemo_rl": {}}
    for version, (rev, recipes) in BRIDGE.items():
        bridge = Source(bridge_dir, rev, {"megatron": "src/"})
        sub = bridge.git("ls-tree", bridge.commit, "3rdparty/Megatron-LM").split()[2]
        mcore = Source(megatron_dir, sub, {"megatron": ""})
        r = Resolver([bridge, mcore])
        entry = {"source": f"NVIDIA-NeMo/Megatron-Bridge@{bridge.commit}" + (f" ({rev})" if rev != bridge.commit else ""),
                 "megatron_core_source": f"NVIDIA/Megatron-LM@{mcore.commit}",
                 "recipes": {stage: spec for stage, spec in recipes.items() if r.exists(spec)},
                 "apis": {api: r.exists(api) for api in (
                     "megatron.bridge.training.utils.omegaconf_utils:process_config_with_overrides",
                     "megatron.bridge.utils.instantiate_utils:instantiate",
                     "megatron.bridge.training.pretrain:pretrain",
                     "megatron.bridge.training.finetune:finetune",
                     "megatron.bridge.training.gpt_step:forward_step",
                     "megatron.bridge.models.conversion.auto_bridge:AutoBridge")},
                 "sections": {}}
        missing = sorted(set(recipes) - set(entry["recipes"]))
        if missing:
            sys.exit(f"{version}: recipe(s) {missing} not found at {rev}")
        for section, spec in SECTIONS.items():
            names = sorted(r.fields(spec))
            if names:
                entry["sections"][section] = names
        out["megatron_bridge"][version] = entry
    for version, (rev, drivers) in NEMO_RL.items():
        rl = Source(rl_dir, rev, {"nemo_rl": ""})
        r = Resolver([rl])
        entry = {"source": f"NVIDIA-NeMo/RL@{rl.commit} ({rev})", "drivers": {}, "files": {}}
        for name, (spec, parent) in drivers.items():
            tree = r.tree(spec)
            for where, sub in NEMO_RL_SUBCLASSES.items():
                node = tree
                for part in where.split(".")[:-1]:
                    node = node.get(part) or {}
                last = where.split(".")[-1]
                if last in node:
                    node[last] = {**(node[last] if isinstance(node[last], dict) else {}), **r.tree(sub)}
            keys = paths(tree)
            entry["drivers"][name] = {"master_config": spec, "defaults": parent, "keys": dict(sorted(keys.items()))}
        for f in ("examples/run_grpo_math.py", "examples/run_grpo_rm.py", "examples/run_dpo.py", "examples/run_rm.py",
                  "examples/configs/grpo_math_1B.yaml", "examples/configs/dpo.yaml", "examples/configs/rm.yaml",
                  "examples/converters/convert_megatron_to_hf.py", "examples/converters/convert_dcp_to_hf.py"):
            entry["files"][f] = f in rl.files
        out["nemo_rl"][version] = entry
    target = Path(__file__).resolve().parent.parent / "stages" / "megatron" / "upstream_fields.yaml"
    header = ("# Generated by dev/upstream_fields.py from the upstream sources named in `source` (do not edit:\n"
              "# re-run the script). The config fields each version accepts; jobs refuses any other key at submit.\n")
    target.write_text(header + yaml.safe_dump(out, sort_keys=False, width=120))
    print(target)


if __name__ == "__main__":
    main(*sys.argv[1:4])
