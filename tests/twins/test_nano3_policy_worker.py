"""nano3's GRPO and DPO configs get past the Megatron policy worker's model set-up in the nemo-rl image:
NeMo RL's own loader (in the twin) merges our rendered config with its parent; then the two refusals
the worker meets with NemotronH's model provider run as upstream wrote them: the aux-loss assert of
megatron_policy_worker.py (executed from its source) and megatron-core's TransformerConfig (NeMo RL's
pinned fork 29e426c01) with NemotronH's activation and our bias_activation_fusion."""
from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from jobs import recipes
from twin import NEMO_RL, ROOT, require, run, source

require()
WORKER = NEMO_RL / "nemo_rl/models/policy/workers/megatron_policy_worker.py"
KEYS = ("bias_activation_fusion", "moe_router_load_balancing_type")


ALGORITHMS = {"grpo": [], "dpo": ["rl.algorithm=dpo", "rl.checkpointing.metric_name=val:validation-heldout_accuracy"]}


def loaded(tmp_path: Path) -> dict[str, dict]:
    """{algorithm: our rendered rl config as NeMo RL's load_config merges it, in the twin (the keys the worker reads)}."""
    from stages.backends import nemo_rl

    r = recipes.load("nano3")
    paths = []
    for name, overrides in ALGORITHMS.items():
        _, out = nemo_rl.render(recipes.compose(r, "rl", overrides), "rl", dict(r.stage("rl").resources))
        out["defaults"] = out["defaults"].replace(str(nemo_rl.REPO), str(NEMO_RL))   # the image's /opt/nemo-rl
        paths.append(tmp_path / f"{name}.yaml")
        paths[-1].write_text(yaml.safe_dump(out, sort_keys=False))
    code = ("import json, sys\nfrom omegaconf import OmegaConf\nfrom nemo_rl.utils.config import load_config\n"
            "print(json.dumps([{k: OmegaConf.select(load_config(p), 'policy.megatron_cfg.' + k) for k in "
            f"{KEYS!r}}} for p in sys.argv[1:]]))")
    res = run(["-c", code, *map(str, paths)])
    assert res.returncode == 0, res.stderr[-2000:]
    return dict(zip(ALGORITHMS, json.loads(res.stdout.strip().splitlines()[-1])))


def aux_loss_assert() -> ast.Assert:
    """The worker's assert on the MoE aux loss, from its source."""
    found = [n for n in ast.walk(ast.parse(WORKER.read_text())) if isinstance(n, ast.Assert)
             and "moe_aux_loss_coeff" in ast.unparse(n.test)]
    assert len(found) == 1
    return found[0]


def provider_default(name: str, bridge: Path) -> str:
    """NemotronHModelProvider's default for a field (Nemotron3NanoProvider inherits it), as source text."""
    tree = ast.parse((bridge / "src/megatron/bridge/models/nemotronh/nemotron_h_provider.py").read_text())
    classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}
    for cls in ("Nemotron3NanoProvider", "NemotronHModelProvider"):
        for node in classes[cls].body:
            if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == name:
                return ast.unparse(node.value)
    raise AssertionError(f"no {name} in Bridge's NemotronH providers")


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    return {"bridge": source("megatron-bridge-079d5a94e.tar.gz", tmp_path_factory.mktemp("bridge")),
            "mcore": source("megatron-lm-29e426c01.tar.gz", tmp_path_factory.mktemp("mcore"))}


def test_nano3s_grpo_and_dpo_policy_configs_pass_the_workers_model_setup_with_nemotron_h(tmp_path, upstream):
    got = loaded(tmp_path)
    # The aux-loss assert, executed as written, with the worker's model_cfg: the balancing type from our
    # config (the worker copies it), the coefficient from Bridge's provider (the worker keeps it).
    coeff = provider_default("moe_aux_loss_coeff", upstream["bridge"])
    assert float(coeff) > 0
    refused = {}
    for name, keys in got.items():
        model_cfg = SimpleNamespace(moe_router_load_balancing_type=keys["moe_router_load_balancing_type"],
                                    moe_aux_loss_coeff=float(coeff))
        try:
            exec(compile(ast.Module([aux_loss_assert()], []), str(WORKER), "exec"), {"model_cfg": model_cfg})
        except AssertionError as e:
            refused[name] = f"megatron_policy_worker.py:{aux_loss_assert().lineno}: {e}"
    # megatron-core's own config with NemotronH's activation and the fusion the worker sets from ours.
    activation = provider_default("activation_func", upstream["bridge"])
    assert activation == "squared_relu"
    code = ("import sys\nfrom megatron.core.activations import squared_relu\n"
            "from megatron.core.transformer.transformer_config import TransformerConfig\n"
            "for name, fusion in zip(sys.argv[1::2], sys.argv[2::2]):\n"
            "    try:\n"
            "        TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, activation_func=squared_relu,"
            " gated_linear_unit=False, bias_activation_fusion=fusion == 'True')\n"
            "    except ValueError as e:\n"
            "        print(name, 'TransformerConfig:', e)\n")
    args = [x for name, keys in got.items() for x in (name, str(keys["bias_activation_fusion"]))]
    r = subprocess.run([str(ROOT / ".venv/bin/python"), "-c", code, *args], capture_output=True, text=True,
                       env={"PYTHONPATH": str(upstream["mcore"]), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    for line in r.stdout.splitlines():
        name, _, why = line.partition(" ")
        refused[name] = "; ".join(filter(None, (refused.get(name), why)))
    assert refused == {}
