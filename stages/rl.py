"""RL: GRPO or DPO on the SFT model, with rollout and reward workers on Ray inside the allocation.

Inputs:  policy       (model: the SFT causal LM folder)
         prompts      (rl-prompts: train.jsonl of {"prompt", "answer"}, the answer feeds the verifier;
                       validation.jsonl, held-out prompts for the periodic validation)
         prefs        (pref-data: {"prompt", "chosen", "rejected"}; read by DPO with rl.dpo.pairs=offline)
         reward_model (reward-model: the rm stage's; scores rollouts with rl.reward.kind=reward_model)
Outputs: model        (model: the trained policy, a HF folder like sft's)
Launch:  jobs submit tiny --stage rl [rl.algorithm=dpo] [rl.generation.backend=vllm]
Backend: `rl.backend: torch` runs here on CPU; `nemo_rl` (nano3) launches NeMo RL in its container.

A Ray cluster spans the job's allocation (`ray: true` in recipe.yaml; runtime/ray_cluster.py). This
process is the driver; the work happens in actors: rollout workers (stages/ml/rollout.py: the `hf`
or `vllm` engine), reward workers (stages/ml/rewards.py: verifier or reward model) and the policy
trainer (stages/ml/policy.py). `rl.cluster.actors: local` makes the same objects plain ones in this
process, called one after the other (no Ray needed: a machine without it, one GPU). With
`device: cuda` the trainer and the hf rollout engines compute on the GPU (Ray actors each reserve
a share of one GPU); reward workers stay on CPU. One GRPO step:

    prompts (a pure function of seed and step)  -> rollout workers: n samples per prompt
    -> reward workers: a reward per sample      -> group-relative advantages (leave-one-out, /std)
    -> trainer: clipped policy gradient + k3 KL -> trainer writes weights -> rollout workers refit

The loss is a token mean over the response tokens trained on. With `rl.grpo.use_dynamic_sampling`
(the tiny recipe's default) only groups whose rewards differ are trained on, so that mean and the
KL term cover those groups' tokens only: a larger step than the full batch's, not the same one.
The trainer packs each group's prompt once (stages/ml/policy.py) and the hf rollout engine runs each
prompt once per group: the same numbers as repeating the prompt per sample, less compute.

DPO pairs come from the preference data (offline) or from on-policy rollouts ranked by the
rewards (best vs worst of a group whose rewards differ). Validation is greedy exact match on
held-out prompts, before training, every `val_period` steps and at the end (answers in
<run>/validation/step_N.jsonl). Checkpoints (trainer state + step) every
`checkpointing.save_period` steps and when Slurm signals; a requeued job resumes at the same step
with the same batches and sampling seeds.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

from stages.schema import Float, Int, Map, Str, check
from stages.ml import batches, formats, lm, tracking
from stages.ml.rewards import KINDS
from stages.ml.rollout import BACKENDS
from stages.contract import StageError

#: The metrics `jobs submit` prints when the stage ends (its result).
HEADLINE = ("rl/val_accuracy", "rl/reward_mean", "rl/reward_accuracy")
ALGORITHMS = ("grpo", "dpo")
ACTORS = ("ray", "local")


# Types and ranges of the torch backend's numbers (the rules between values follow in check_config).
_STEPS = Int(1, 10**7)
TORCH = Map({
    "grpo": Map({"num_prompts_per_step": Int(1, 1 << 20), "num_generations_per_prompt": Int(1, 1024),
                 "max_num_steps": _STEPS, "val_period": Int(1, 10**7), "max_val_samples": Int(1, 10**7)}, extra=True),
    "loss_fn": Map({"reference_policy_kl_penalty": Float(0, 100), "ratio_clip_min": Float(0, 1),
                    "ratio_clip_max": Float(0, 100)}, extra=True),
    "dpo": Map({"num_pairs_per_step": Int(1, 1 << 20), "beta": Float(0, 1000, open_lo=True),
                "sft_loss_weight": Float(0, 1000), "lr": Float(0, 1, open_lo=True), "max_num_steps": _STEPS}, extra=True),
    "policy": Map({"lr": Float(0, 1, open_lo=True), "warmup": Int(0, 10**7), "min_lr_ratio": Float(0, 1),
                   "weight_decay": Float(0, 10), "max_grad_norm": Float(0, 1e6, open_lo=True)}, extra=True),
    "generation": Map({"temperature": Float(0, 100), "max_new_tokens": Int(1, 1 << 20),
                       "min_new_tokens": Int(0, 1 << 20, required=False)}, extra=True),
    "cluster": Map({"rollout_workers": Int(0, 1024), "reward_workers": Int(0, 1024),
                    "threads": Int(1, 4096, null=True, required=False),
                    "actors": Str(choices=ACTORS, required=False)}, extra=True),
    "checkpointing": Map({"save_period": Int(1, 10**7)}, extra=True),
}, extra=True)


def check_config(config: dict, resources: dict | None = None) -> list[str]:
    """Every problem with the `rl:` section, for one error message (called by `jobs submit` too).
    `backend: nemo_rl`: the rendered NeMo RL config against the image's NeMo RL (stages/backends/nemo_rl.py)."""
    cfg = config["rl"]
    if cfg.get("backend", "torch") == "nemo_rl":
        from stages.backends import nemo_rl

        return nemo_rl.check_config(config, "rl", resources)
    problems = [] if cfg.get("backend", "torch") == "torch" else [f"rl.backend must be torch or nemo_rl (got {cfg['backend']!r})"]
    problems += check(cfg, TORCH, "rl") + lm.device_problems(config, resources)
    if problems:
        return problems  # the rules below read these values
    if cfg["algorithm"] not in ALGORITHMS:
        problems.append(f"rl.algorithm must be grpo or dpo (got {cfg['algorithm']!r})")
    if cfg["generation"]["backend"] not in BACKENDS:
        problems.append(f"rl.generation.backend must be hf or vllm (got {cfg['generation']['backend']!r})")
    if cfg["reward"]["kind"] not in KINDS:
        problems.append(f"rl.reward.kind must be verifier or reward_model (got {cfg['reward']['kind']!r})")
    pattern = cfg["reward"].get("answer_pattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except (re.error, TypeError):
            problems.append(f"rl.reward.answer_pattern must be a regular expression (got {pattern!r})")
    if cfg["grpo"]["num_generations_per_prompt"] < 2:
        problems.append("rl.grpo.num_generations_per_prompt must be >= 2 (advantages compare a group's samples)")
    if cfg["generation"]["temperature"] <= 0:
        problems.append("rl.generation.temperature must be > 0 (rollouts are sampled)")
    if cfg["generation"].get("min_new_tokens", 0) > cfg["generation"]["max_new_tokens"]:
        problems.append(f"rl.generation.min_new_tokens {cfg['generation']['min_new_tokens']} exceeds "
                        f"rl.generation.max_new_tokens {cfg['generation']['max_new_tokens']}")
    if cfg["dpo"]["pairs"] not in ("offline", "on_policy"):
        problems.append(f"rl.dpo.pairs must be offline or on_policy (got {cfg['dpo']['pairs']!r})")
    kinds = cfg["dpo"].get("pair_kinds")
    if kinds is not None and (not isinstance(kinds, list) or not kinds or not all(isinstance(k, str) for k in kinds)):
        problems.append(f"rl.dpo.pair_kinds must be a non-empty list of pair kinds, or null for all (got {kinds!r})")
    for key in ("rollout_workers", "reward_workers"):
        if cfg["cluster"][key] < 1:
            problems.append(f"rl.cluster.{key} must be >= 1")
    return problems


def uses_ray(config: dict) -> bool:
    """Whether the job starts its Ray cluster: not with `rl.cluster.actors: local`, whose actors all
    live in the stage's process (the image needs no Ray either)."""
    cfg = config["rl"]
    return cfg.get("backend", "torch") != "torch" or cfg["cluster"].get("actors", "ray") != "local"


def unused_inputs(config: dict) -> set[str]:
    """The input roles this config never reads: the reward model unless it scores the rollouts (a
    verifier-only GRPO never loads it), the preference pairs unless DPO trains on them offline, and
    with NeMo RL's DPO the prompts."""
    cfg = config["rl"]
    dpo = cfg["algorithm"] == "dpo"
    if cfg.get("backend", "torch") == "nemo_rl":      # stages/backends/nemo_rl.py translate(): what each driver reads
        if dpo:
            return {"prompts", "reward_model"}
        return {"prefs"} | (set() if "reward_model" in (cfg.get("env") or {}) else {"reward_model"})
    unused = set() if cfg["reward"]["kind"] == "reward_model" else {"reward_model"}
    return unused | (set() if dpo and cfg["dpo"]["pairs"] == "offline" else {"prefs"})


def preview(config: dict, resources: dict) -> str | None:
    """For `jobs submit --dry-run`: the NeMo RL config and command a nemo_rl job will run."""
    if config["rl"].get("backend") != "nemo_rl":
        return None
    from stages.backends import nemo_rl

    return nemo_rl.preview(config, resources, "rl")


def shards(items: list, k: int) -> list[list]:
    """`items` cut into k contiguous, nearly equal pieces (order kept)."""
    step, extra = divmod(len(items), k)
    out, start = [], 0
    for i in range(k):
        end = start + step + (i < extra)
        out.append(items[start:end])
        start = end
    return out


def gate(ctx, produced: dict[str, Path]) -> list:
    """What a finished rl must show (stages/gate.py): every step asked for, the policy trained in at
    least one (a run whose every group's rewards tied trained nothing), rollouts that generated
    tokens (on-policy), a finite loss, a policy that loads. NeMo RL's by its exported folder alone."""
    from stages import gate as g

    cfg = ctx.config["rl"]
    if cfg.get("backend", "torch") == "nemo_rl":
        return [g.model_loads(produced["model"], "model", whole=False)]
    algo = cfg["algorithm"]
    steps = cfg["grpo"]["max_num_steps"] if algo == "grpo" else cfg["dpo"]["max_num_steps"]
    checks = [g.steps_trained(ctx, "rl/step_time_s", steps, "rl step(s)"),
              g.steps_with(ctx, "rl/loss", steps, "the policy trained")]
    if not (algo == "dpo" and cfg["dpo"]["pairs"] == "offline"):
        checks.append(g.positive("tokens", g.summed(ctx, "rl/generated_tokens"), "token(s) generated in rollouts"))
    return checks + [g.losses_finite(ctx, "rl/loss"), g.model_loads(produced["model"], "model")]


def run(ctx) -> dict[str, Path]:
    cfg = ctx.section("rl")
    if cfg.get("backend", "torch") == "nemo_rl":
        from stages.backends import nemo_rl

        return nemo_rl.run_stage(ctx)
    problems = check_config(ctx.config)
    if problems:
        raise StageError("rl: " + "; ".join(problems))
    local = not uses_ray(ctx.config)   # backend torch here: the plan's answer, so the job started no Ray
    if local and not ctx.dist.is_main:
        return {}   # every actor lives in rank 0's process; another node of the allocation has no part
    import torch

    from stages.ml.losses import group_advantages

    seed = ctx.config["seed"]
    algo, gen, grpo, dpo = cfg["algorithm"], cfg["generation"], cfg["grpo"], cfg["dpo"]
    steps = grpo["max_num_steps"] if algo == "grpo" else dpo["max_num_steps"]
    policy_dir = ctx.input("policy")
    tokenizer = lm.load_tokenizer(policy_dir)
    rows = formats.rl_prompts(ctx.input("prompts"), "train")
    prompt_ids = lm.encode(tokenizer, [r["prompt"] for r in rows], bos=True)
    val = formats.rl_prompts(ctx.input("prompts"), "validation")[:grpo["max_val_samples"]]
    val_ids = lm.encode(tokenizer, [r["prompt"] for r in val], bos=True)
    longest = max(len(p) for p in prompt_ids + val_ids) + gen["max_new_tokens"]
    if longest > json.loads((policy_dir / "config.json").read_text())["max_position_embeddings"]:
        raise StageError(f"rl: prompt + rl.generation.max_new_tokens = {longest} tokens exceeds the policy's positions")

    # The Ray cluster of this allocation (a local one when run outside a job), and its actors; or
    # the same actors in this process (then the job started no cluster: uses_ray).
    if not local:
        import ray

        ray.init(address=ctx.ray_address, include_dashboard=False, logging_level="ERROR",
                 log_to_driver=False, configure_logging=False)
    try:
        actors = Actors(cfg, policy_dir, ctx.inputs.get("reward_model"), seed, steps, ctx.checkpoint_dir / "refit",
                        device=lm.device_of(ctx.config), local=local, cpus=ctx.resources.cpus_per_task)
        ckpt, identity = ctx.checkpoint_dir / "rl.pt", ctx.identity()
        start = actors.get(actors.trainer.load_checkpoint.remote(str(ckpt), identity)) if ckpt.exists() else 0
        if isinstance(start, str):  # another run's, config's or inputs', or nothing left to train
            from stages.ml.loop import ResumeRefused

            raise ResumeRefused(start)
        if start:
            actors.refit()  # the rollout workers start from the SFT weights; bring them to the checkpoint's
        prefs = _offline_pairs(ctx.input("prefs"), dpo.get("pair_kinds")) if algo == "dpo" and dpo["pairs"] == "offline" else []

        def validate(step: int) -> None:
            """Greedy answers of the rollout workers (so, of the weights they were refit with)."""
            texts = tokenizer.batch_decode([g[0] for g in actors.generate(val_ids, 1, 0.0, 0)], skip_special_tokens=True)
            ctx.log({"rl/val_accuracy": sum(t.strip() == r["answer"] for t, r in zip(texts, val)) / len(val)}, step=step)
            folder = ctx.run_dir / "validation"
            folder.mkdir(exist_ok=True)
            (folder / f"step_{step:06d}.jsonl").write_text("".join(
                json.dumps({**r, "response": t}, sort_keys=True) + "\n" for r, t in zip(val, texts)))

        with tracking.session(ctx):
            ctx.log({"rl/prompts": len(rows), "rl/rollout_workers": len(actors.workers), "rl/ray_nodes": actors.nodes(),
                     **({"rl/resumed_from": start} if start else {})}, step=start)
            if start == 0:
                validate(0)
            progress = tracking.Progress(ctx, "rl", steps, start)   # a line in the job's log, progress.json
            for step in range(start, steps):
                if ctx.should_stop():
                    actors.get(actors.trainer.save_checkpoint.remote(str(ckpt), step, identity, ctx.config_to_keep))
                    ctx.requeue()
                t0 = time.perf_counter()
                stats: dict = {}
                if algo == "dpo" and dpo["pairs"] == "offline":
                    pr = [prefs[i] for i in batches.indices(seed, step, len(prefs), dpo["num_pairs_per_step"])]
                    stats = actors.call("dpo_step", lm.encode(tokenizer, [x["prompt"] for x in pr], bos=True),
                                        lm.encode(tokenizer, [x["chosen"] for x in pr], bos=False, eos=True),
                                        lm.encode(tokenizer, [x["rejected"] for x in pr], bos=False, eos=True))
                else:
                    # Rollouts: n samples for each of this step's prompts, then a reward for each sample.
                    n = grpo["num_generations_per_prompt"]
                    picked = batches.indices(seed, step, len(rows), grpo["num_prompts_per_step"])
                    groups = actors.generate([prompt_ids[i] for i in picked], n, gen["temperature"],
                                             seed * 1_000_003 + step)
                    t_gen = time.perf_counter()
                    flat = [r for g in groups for r in g]
                    idx = [i for i in picked for _ in range(n)]
                    scores = actors.score([rows[i]["prompt"] for i in idx],
                                          tokenizer.batch_decode(flat, skip_special_tokens=True),
                                          [rows[i]["answer"] for i in idx],
                                          [bool(r) and r[-1] == tokenizer.eos_token_id for r in flat])
                    stats.update(generate_s=t_gen - t0, reward_s=time.perf_counter() - t_gen,
                                 generated_tokens=sum(len(r) for r in flat), reward_mean=sum(scores) / len(scores))
                    if algo == "grpo":
                        adv = group_advantages(torch.tensor(scores), n, normalize=grpo["normalize_rewards"],
                                               leave_one_out=grpo["use_leave_one_out_baseline"]).tolist()
                        # A group whose samples all scored alike has zero advantages: no policy gradient.
                        # Dynamic sampling trains on the other groups only. Not the full batch's update: the
                        # token mean then runs over the kept groups' tokens (the policy gradient is scaled
                        # up by all tokens / kept tokens) and the dropped groups' KL term is gone.
                        keep = [j for j in range(0, len(flat), n) if len(set(scores[j:j + n])) > 1]
                        stats["zero_signal_groups"] = len(flat) // n - len(keep)
                        if grpo["use_dynamic_sampling"]:
                            rows_kept = [k for j in keep for k in range(j, j + n)]
                            idx, flat, adv = ([x[k] for k in rows_kept] for x in (idx, flat, adv))
                        if flat:
                            stats.update(actors.call("grpo_step", [prompt_ids[i] for i in idx], flat, adv))
                    else:
                        pairs = _on_policy_pairs(picked, prompt_ids, groups, scores, n)
                        if pairs[0]:  # a step whose groups all tie (all right or all wrong) has nothing to prefer
                            stats.update(actors.call("dpo_step", *pairs))
                        stats["pairs"] = len(pairs[0])
                # Refit: the rollout workers generate the next step with the weights just trained.
                t_refit = time.perf_counter()
                actors.refit()
                stats.update(refit_s=time.perf_counter() - t_refit, step_time_s=time.perf_counter() - t0)
                ctx.log({f"rl/{k}": v for k, v in stats.items()}, step=step + 1)
                progress.update(step + 1, stats.get("loss", float("nan")), stats.get("lr_now", float("nan")),
                                stats.get("generated_tokens", 0),
                                extra={"reward": stats.get("reward_mean"), "reward_accuracy": stats.get("reward_accuracy")})
                if (step + 1) % grpo["val_period"] == 0 or step + 1 == steps:
                    validate(step + 1)
                if (step + 1) % cfg["checkpointing"]["save_period"] == 0 and step + 1 < steps:
                    actors.get(actors.trainer.save_checkpoint.remote(str(ckpt), step + 1, identity, ctx.config_to_keep))
            out = actors.call("save_weights", str(ctx.output_dir("model")))
    finally:
        if not local:
            ray.shutdown()
    return {"model": Path(out)}


class Actors:
    """The stage's actors: rollout workers, reward workers, the trainer. Ray actors (rollout and
    reward workers spread over nodes), or with `local` the same classes in this process, behind
    the same `handle.method.remote(...)` / `get` calls."""

    def __init__(self, cfg: dict, policy_dir: Path, reward_model_dir: Path, seed: int, steps: int, refit_dir: Path,
                 device: str = "cpu", local: bool = False, cpus: int = 0):
        from stages.ml.policy import PolicyTrainer
        from stages.ml.rewards import RewardWorker
        from stages.ml.rollout import RolloutWorker
        from stages.rm import load_reward_model, score

        cl, kind = cfg["cluster"], cfg["reward"]["kind"]
        # The policy's torch threads; null: the allocation's CPUs per task (ctx.resources).
        threads = cl["threads"] or cpus or None
        self.local = local
        rollout = (cfg["generation"]["backend"], str(policy_dir), seed, threads, device)
        reward = (kind, str(reward_model_dir) if kind == "reward_model" else None, cl["threads"],
                  cfg["reward"].get("answer_pattern"), load_reward_model, score)
        trainer = (str(policy_dir), cfg, seed, steps, threads, device)
        if local:
            self.workers = [InProcess(RolloutWorker(*rollout)) for _ in range(cl["rollout_workers"])]
            self.scorers = [InProcess(RewardWorker(*reward)) for _ in range(cl["reward_workers"])]
            self.trainer = InProcess(PolicyTrainer(*trainer))
        else:
            import ray

            need = cl["rollout_workers"] * cl["rollout_cpus"] + cl["trainer_cpus"] + cl["reward_workers"] * cl["reward_cpus"]
            have = ray.cluster_resources().get("CPU", 0)
            if need > have:
                raise StageError(f"rl: the actors need {need:g} CPUs (rl.cluster) but the Ray cluster has {have:g}")
            # On CUDA the trainer and the rollout workers share one GPU (Ray hands each its share and
            # sets CUDA_VISIBLE_DEVICES for it); on CPU they ask for none.
            gpu = 1 / (cl["rollout_workers"] + 1) if device == "cuda" else 0
            if gpu and ray.cluster_resources().get("GPU", 0) < 1:
                raise StageError("rl: device is cuda, but the Ray cluster has no GPU (rl.cluster.actors=local runs "
                                 "the actors in this process)")
            spread = {"scheduling_strategy": "SPREAD"}
            self.workers = [ray.remote(RolloutWorker).options(num_cpus=cl["rollout_cpus"], **({"num_gpus": gpu} if gpu else {}),
                                                              **spread).remote(*rollout)
                            for _ in range(cl["rollout_workers"])]
            self.scorers = [ray.remote(RewardWorker).options(num_cpus=cl["reward_cpus"], **spread).remote(*reward)
                            for _ in range(cl["reward_workers"])]
            self.trainer = ray.remote(PolicyTrainer).options(num_cpus=cl["trainer_cpus"],
                                                             **({"num_gpus": gpu} if gpu else {})).remote(*trainer)
        self.max_new_tokens = cfg["generation"]["max_new_tokens"]
        self.min_new_tokens = cfg["generation"].get("min_new_tokens", 0)   # rollouts only, not validation
        self.refit_dir = refit_dir

    def get(self, futures):
        """`ray.get`; in process, the results themselves."""
        if self.local:
            return futures
        import ray

        return ray.get(futures)

    def generate(self, prompts: list[list[int]], n: int, temperature: float, seed: int) -> list[list[list[int]]]:
        """n responses per prompt, the prompts split over the rollout workers (order kept); sampled
        ones (rollouts) at least rl.generation.min_new_tokens long, greedy ones (validation) as the
        model ends them."""
        least = self.min_new_tokens if temperature > 0 else 0
        futures = [w.generate.remote(part, n, temperature, self.max_new_tokens, seed * 97 + k, least)
                   for k, (w, part) in enumerate(zip(self.workers, shards(prompts, len(self.workers)))) if part]
        return [group for out in self.get(futures) for group in out]

    def score(self, prompts: list[str], texts: list[str], answers: list[str], finished: list[bool]) -> list[float]:
        k = len(self.scorers)
        futures = [s.score.remote(p, t, a, f) for s, p, t, a, f in
                   zip(self.scorers, shards(prompts, k), shards(texts, k), shards(answers, k), shards(finished, k)) if p]
        return [x for out in self.get(futures) for x in out]

    def call(self, method: str, *args):
        """A trainer method, waited for."""
        return self.get(getattr(self.trainer, method).remote(*args))

    def refit(self) -> None:
        """The trainer writes its weights; every rollout worker loads them."""
        folder = self.call("refit_weights", str(self.refit_dir))
        self.get([w.load_weights.remote(folder) for w in self.workers])

    def nodes(self) -> int:
        """How many Ray nodes the rollout workers landed on (in process: this one)."""
        if self.local:
            return 1
        return len(set(self.get([w.node.remote() for w in self.workers])))


class InProcess:
    """An object called like a Ray actor handle: `handle.method.remote(*args)` runs the method here,
    now, and returns its result (which `Actors.get` passes through)."""

    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name: str):
        from types import SimpleNamespace

        return SimpleNamespace(remote=getattr(self._obj, name))


def _on_policy_pairs(picked: list[int], prompt_ids: list[list[int]], groups: list[list[list[int]]],
                     scores: list[float], n: int) -> tuple[list, list, list]:
    """DPO pairs from rollouts: per prompt, the best vs the worst sample when their rewards differ."""
    prompts, chosen, rejected = [], [], []
    for k, i in enumerate(picked):
        s = scores[k * n:(k + 1) * n]
        best, worst = max(range(n), key=s.__getitem__), min(range(n), key=s.__getitem__)
        if s[best] > s[worst]:
            prompts.append(prompt_ids[i])
            chosen.append(groups[k][best])
            rejected.append(groups[k][worst])
    return prompts, chosen, rejected


def _offline_pairs(prefs: Path, kinds: list[str] | None) -> list[dict]:
    """data.prefs' training pairs, only those of `kinds` (their "kind" field) when it is set."""
    pairs = _jsonl(prefs / "train.jsonl")
    if kinds is None:
        return pairs
    kept = [p for p in pairs if p.get("kind") in kinds]
    if not kept:
        have = sorted({str(p.get("kind")) for p in pairs})
        raise StageError(f"rl: rl.dpo.pair_kinds {kinds} keeps none of the {len(pairs)} pairs (their kinds: {', '.join(have)})")
    return kept


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]
