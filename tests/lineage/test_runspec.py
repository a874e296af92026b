"""The run record type reads every stored record and writes the same JSON back."""
import json

from lineage import Store
from lineage.ids import run_key
from lineage.runspec import RunSpec

#: A run record as `jobs submit --executor slurm` has written it (keys and shapes of a real one).
STORED = {
    "id": "01a20b60-24bc-730d-91c5-8829321dac64", "created": 1764000000.5, "recipe": "tiny", "stage": "sft",
    "module": "stages.sft", "config": {"sft": {"steps": 60}, "seed": 7}, "inputs": {"data": "art_" + "1" * 64},
    "pending_inputs": {"model": {"run": "01a20b5e-fba1-7007-a3a8-f9cfb9573793", "output": "model"}},
    "input_kinds": {"data": "sft-data", "model": "model"}, "outputs": {"model": "model"},
    "resources": {"nodes": 1, "time_min": 30}, "container": None, "ray": False, "executor": "slurm",
    "code": {"git_sha": "e16b3f4", "dirty": False, "snapshot": "art_" + "2" * 64, "files": 310, "root": "/x"},
    "environment": {"kind": "python", "python": "3.11.2", "digest": "sha256:" + "3" * 64, "packages": {}},
    "profile": "dev", "container_image": None, "a_key_from_a_newer_writer": [1, 2],
}


def test_a_stored_record_reads_by_attribute_and_writes_back_unchanged():
    spec = RunSpec.from_json(STORED)
    assert spec.stage == "sft" and spec.pending_inputs["model"]["output"] == "model" and spec.profile == "dev"
    assert spec.to_json() == STORED                      # nothing lost, nothing added
    assert spec["container_image"] is None and "env_drift" not in spec and spec.get("ray") is False
    assert spec.key() == run_key(STORED)


def test_a_local_record_has_no_executor_facts_and_a_hand_made_one_reads(tmp_path):
    local = {k: v for k, v in STORED.items() if k not in ("profile", "container_image", "a_key_from_a_newer_writer")}
    assert RunSpec.from_json(local).to_json() == local
    store = Store.open(tmp_path / "s", create=True)
    run = store.create_run(RunSpec.from_json({k: v for k, v in local.items() if k not in ("id", "created")}))
    files = list((tmp_path / "s" / "records" / "run").rglob(f"{run}.json"))
    written = json.loads(files[0].read_text())
    assert {k: v for k, v in written.items() if k not in ("id", "created")} == \
        {k: v for k, v in local.items() if k not in ("id", "created")}
    bare = store.run(store.create_run({"recipe": "r", "stage": "s", "inputs": {}, "config": {}}))
    assert bare.spec.module is None and bare.spec.outputs == {} and bare.spec.created > 0
