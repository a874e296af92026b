"""NVIDIA's own nano3 pretrain data prep (Nemotron e27b371's recipes/nano3/stage0_pretrain/data_prep.py: a
cosmos-xenna pipeline on Ray, PlanStage -> DownloadStage -> BinIdxTokenizationStage) run by its own entry
point in its CPU twin (dev/twin_venv.sh nemotron), on the local sources and tokenizer of
tests/fixtures/nano3_sources, next to our prep_pretrain on the same text with the same tokenizer settings
(add_bos false, add_eos true: Nemotron's config and ours). Both outputs are read back by megatron-core's
IndexedDataset (the Megatron venv, as tests/stages/test_prep.py reads ours).

The claim: every document that has text is the same token sequence in both, EOS-terminated, each once. The
two place documents in shards and splits differently (Nemotron gives whole shards to train, valid and
test; ours holds out a fraction of every shard), so the documents are compared as multisets per source.
Where they differ, by choice, and asserted exactly: an empty text is a document of one EOS in Nemotron's
output and no document in ours; Nemotron writes int32 tokens, ours megatron-core's smallest fitting dtype
(uint16 for this 400-token vocabulary)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from helpers import run_jobs
from lineage import Store
from twin import ROOT

sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "nano3_sources"))
import make  # noqa: E402

VENV = ROOT / ".venv-nemotron"
PY = VENV / "bin" / "python"
DATA_PREP = VENV / "Nemotron" / "src" / "nemotron" / "recipes" / "nano3" / "stage0_pretrain" / "data_prep.py"
MCORE_PYTHON = os.environ.get("JOBS_MCORE_PYTHON") or str(ROOT / ".venv-bridge" / "bin" / "python")
if not PY.exists():
    pytest.skip(f"{PY} is missing: run dev/twin_venv.sh nemotron to run this test", allow_module_level=True)
pytestmark = pytest.mark.slow

#: `python -c READ PREFIXES_JSON` in the Megatron venv: each prefix's dtype and documents, by megatron-core.
READ = ("import json, sys\nfrom megatron.core.datasets.indexed_dataset import IndexedDataset\nout = {}\n"
        "for p in json.loads(sys.argv[1]):\n    d = IndexedDataset(p)\n"
        "    out[p] = {'dtype': d.index.dtype.__name__, 'docs': [d[i].tolist() for i in range(len(d))]}\n"
        "print(json.dumps(out))\n")


def nemotron_config(src: Path, out: Path, shards: int) -> str:
    """The tiny.yaml of Nemotron's stage0_pretrain pointed at local folders: a blend of the fixture's two
    sources (weights 3:1, as ours) and the fixture's tokenizer folder. No W&B, no sampling. BATCH mode: the
    STREAMING default asks for the three stages' CPUs at once (2), more than Ray finds in a 2-core machine's
    share here."""
    blend = {"datasets": [{"name": "web", "path": str(src / "pretrain/web"), "text_field": "text", "weight": 3.0},
                          {"name": "math", "path": str(src / "pretrain/math"), "text_field": "text", "weight": 1.0}]}
    (out.parent / "blend_raw.json").write_text(json.dumps(blend))
    return "\n".join([
        f"blend_path: {out.parent / 'blend_raw.json'}", f"output_dir: {out}", f"num_shards: {shards}",
        "valid_shards: 1", "test_shards: 1",
        f"tokenizer: {{model: {src / 'tokenizer'}, add_bos: false, add_eos: true}}",
        "text_field: text", "min_doc_chars: null", "max_doc_tokens: null", "sample: null", "force: true",
        "config_name: twin", "execution_mode: batch",
        "plan: {planner_cpus: 0.5}", "download: {batch_size: 1, stage_cpus: 0.5}", "tokenization: {cpus_per_worker: 1}",
        "observability: {pipeline_logging_interval_s: 5, wandb_log_pipeline_stats: false}", ""])


def read_back(prefixes: list[str]) -> dict:
    if not Path(MCORE_PYTHON).is_file():
        pytest.fail(f"{MCORE_PYTHON} is missing: dev/bridge_venv.sh builds it, or set JOBS_MCORE_PYTHON")
    p = subprocess.run([MCORE_PYTHON, "-c", READ, json.dumps(prefixes)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nemotron prep")
    src = tmp / "src"
    make.make(src)
    # No hub: every path is a local folder, and a reach for the hub fails instead of fetching.
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    ours = run_jobs(tmp / "store", "submit", "nano3", "--stage", "prep_pretrain", "tracking.wandb=disabled",
                    *make.overrides(src)["prep_pretrain"], env=offline)
    assert ours.code == 0, ours.out + ours.err
    store = Store(tmp / "store")
    run = store.run(next(iter(store.index().runs(stage="prep_pretrain")))["id"])
    blend = Path(store.artifact(run.outputs["blend"])["path"])

    out = tmp / "nemotron" / "out"
    out.parent.mkdir()
    (out.parent / "tiny.yaml").write_text(nemotron_config(src, out, shards=3))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "RAY_", "WANDB_")) and k != "NEMO_RUN_DIR"}
    # After ours, with a Ray temp folder of its own, and, as root, in a PID namespace of its own: xenna's
    # ray.init() starts a local cluster, and the state API its monitor lists actors by finds that cluster by
    # scanning the machine's processes for a GCS: it refuses to guess when another test's Ray runs beside it.
    # Short: Ray's socket paths must fit in 107 bytes.
    ray_tmp = tempfile.mkdtemp(prefix="rayn", dir="/tmp")
    env.update(offline, RAY_TMPDIR=ray_tmp, PYTHONPYCACHEPREFIX=os.environ.get("PYTHONPYCACHEPREFIX", "/tmp/jobs-pycache"))
    try:
        alone = ["unshare", "--pid", "--fork", "--mount-proc"] if os.geteuid() == 0 else []
        theirs = subprocess.run([*alone, str(PY), str(DATA_PREP), "--config", str(out.parent / "tiny.yaml")], cwd=out.parent,
                                env=env, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert theirs.returncode == 0, (theirs.stdout + theirs.stderr)[-5000:]
    return {"src": src, "ours": blend, "theirs": out}


def by_source(got: dict, marker: str) -> dict[str, tuple[set[str], Counter]]:
    """{source: (dtypes, multiset of its documents)} from read_back's answer; the source is the path's folder
    after `marker`."""
    found: dict[str, tuple[set, Counter]] = {}
    for prefix, d in got.items():
        name = Path(prefix).parts[Path(prefix).parts.index(marker) + 1]
        dtypes, docs = found.setdefault(name, (set(), Counter()))
        dtypes.add(d["dtype"])
        docs.update(tuple(doc) for doc in d["docs"])
    return found


def test_nvidias_data_prep_and_ours_write_the_same_documents_token_for_token(both):
    from transformers import AutoTokenizer

    blend = json.loads((both["theirs"] / "blend.json").read_text())
    # Bridge's per_split_data_args_path layout: [weight, prefix, ...] per split, the 3 shards of each source
    # given whole to one split.
    assert sorted(blend) == ["test", "train", "valid"]
    prefixes = [p for split in blend.values() for p in split[1::2]]
    assert len(prefixes) == len(set(prefixes)) == 6
    mine = [str(p.with_suffix("")) for p in sorted(both["ours"].rglob("*.idx"))]
    got = read_back(prefixes + mine)       # one megatron-core process for both: its import is most of the time
    theirs = by_source({p: got[p] for p in prefixes}, "datasets")
    ours = by_source({p: got[p] for p in mine}, "blend")
    assert sorted(theirs) == sorted(ours) == ["math", "web"]

    eos = AutoTokenizer.from_pretrained(both["src"] / "tokenizer").eos_token_id
    web_texts = [json.loads(line)["text"] for f in sorted((both["src"] / "pretrain/web").glob("*.jsonl"))
                 for line in f.read_text().splitlines()]
    empty = {"web": web_texts.count(""), "math": 0}
    assert empty["web"] == 1
    for name in ("web", "math"):
        (their_dtypes, their_docs), (our_dtypes, our_docs) = theirs[name], ours[name]
        assert their_dtypes == {"int32"} and our_dtypes == {"uint16"}, name
        # Every document with text: the same tokens, EOS last and no BOS, once in each.
        assert all(doc[-1] == eos and eos not in doc[:-1] for doc in our_docs), name
        assert their_docs - our_docs == Counter({(eos,): empty[name]}), name
        assert our_docs - their_docs == Counter(), name
    assert sum(ours["web"][1].values()) == len(web_texts) - 1 and sum(ours["math"][1].values()) == 40
