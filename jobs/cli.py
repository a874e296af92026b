"""`jobs`: submit recipe stages and query the lineage store.

Only the standard library and YAML are imported at start; each command imports what it needs.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_STORE = "~/.jobs"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other bad input
        sys.stderr.write(f"jobs: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def store_path(args: argparse.Namespace) -> Path:
    return Path(args.store or os.environ.get("JOBS_HOME") or DEFAULT_STORE).expanduser()


def open_store(args: argparse.Namespace, create: bool = False):
    from lineage import Store

    return Store.open(store_path(args), create=create)


# ---- commands -------------------------------------------------------------------------------
def cmd_submit(args: argparse.Namespace) -> int:
    """Everything a user can get wrong is refused before the store is created or written: the
    profile, the recipe's resources, the store path, and every input artifact, re-hashed."""
    from dataclasses import asdict

    from jobs import profiles
    from jobs.errors import ExecutorError
    from jobs.executors import NAMES
    from jobs.plan import make_plan, record, verify_inputs
    from jobs.provenance import CodeChanged, store_snapshot
    from lineage import Store

    if args.executor not in NAMES:
        raise ExecutorError(f"unknown executor {args.executor!r} (executors: {', '.join(NAMES)})")
    stage_sel = args.stages or args.stage
    if not stage_sel:
        raise ExecutorError("say which stage(s) to run: --stage STAGE, --stage all, or --stages a,b")
    # A named profile is checked with either executor (a typo must not pass silently); its store applies to both.
    profile = profiles.load(args.profile) if args.executor == "slurm" or args.profile else None
    root = Path(args.store or os.environ.get("JOBS_HOME") or (profile and profile.store) or DEFAULT_STORE).expanduser()
    _check_store_path(root)
    store = Store(root)
    if args.executor == "slurm":
        from jobs.executors import slurm

        target = slurm.SlurmTarget(profile, allow_unpinned=args.allow_unpinned)
        executor = slurm.SlurmExecutor(target)
    for tries in (1, 2, 3):
        plan = make_plan(store, args.recipe, stage_sel, args.overrides, args.input, args.executor, not args.dry_run)
        for sp in plan.stages:
            profiles.check_resources(sp.resources, f"{sp.recipe}/{sp.stage} in recipe.yaml")
        if args.dry_run:
            if args.executor == "local":
                from jobs.show import print_plan
                print_plan(plan)
            else:
                print(slurm.dry_run(store.root, [asdict(sp) for sp in plan.stages], target))
            return 0
        if args.executor == "slurm":
            prepared = executor.prepare(store.root, [asdict(sp) for sp in plan.stages])
        verify_inputs(store, plan)
        store = Store.open(store.root, create=True)
        store.ensure_writable()
        try:
            store_snapshot(store, plan.code)
            break
        except CodeChanged:  # someone saved a file between planning and copying: plan again
            if tries == 3:
                raise

    if args.executor == "local":
        reused = _reuse(store, plan, None, args.force)
        run_ids = record(store, plan, reused=reused)
        print(f"recorded {len(run_ids)} run(s) in {store.root}")
        from jobs.executors.local import LocalExecutor
        return 0 if LocalExecutor().run_chain(store, run_ids) else 1
    extras = [{"container_image": p["image"].reference if p["image"] else None, "profile": target.profile.name}
              for p in prepared]
    reused = _reuse(store, plan, extras, args.force)
    run_ids = record(store, plan, extras=extras, reused=reused)
    print(f"recorded {len(run_ids)} run(s) in {store.root}")
    keep = [p for sp, p in zip(plan.stages, prepared) if sp.stage not in reused]
    return 0 if executor.submit_chain(store, run_ids, keep) else 1


def _check_store_path(root: Path) -> None:
    """A store path reaches sbatch scripts and log paths: no control characters (a newline would
    start a live script line)."""
    from jobs.errors import JobsError

    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in str(root)):
        raise JobsError(f"store path {str(root)!r} has a control character (newline, tab, ...); choose another folder")


def _reuse(store, plan, extras, force: bool) -> dict[str, str]:
    """The run cache: print and return the stages an identical, verified, SUCCEEDED run covers."""
    from jobs.plan import cached

    if force:
        return {}
    reused = cached(store, plan, extras)
    for stage, run_id in reused.items():
        outs = " ".join(f"{k}={v[:16]}" for k, v in store.run(run_id).outputs.items())
        print(f"{run_id}  {stage:<9} reused: an identical run already succeeded and its outputs verify ({outs}); --force re-runs")
    return reused


def cmd_status(args: argparse.Namespace) -> int:
    from jobs import status
    from jobs.errors import JobsError
    from lineage.store import TERMINAL

    if args.limit < 1:
        raise JobsError(f"--limit must be at least 1 (got {args.limit})")
    store = open_store(args)
    idx = store.index()
    if args.run:
        run_ids = [idx.resolve_run(args.run)]
    else:
        run_ids = [r["id"] for r in idx.runs(limit=args.limit) if args.all or r["state"] not in TERMINAL]
    print(f"{'RUN':<36}  {'STAGE':<9} {'STATE':<10} {'SLURM':<22} WHY")
    for view, live in status.statuses(store, run_ids):
        job = status.slurm_job(view)
        slurm = f"{job} {live.state}" if job and live else (job or "local")
        why = (live.reason if live and live.reason else "") or (view.reason or "")
        print(f"{view.id:<36}  {view.spec.get('stage', '?'):<9} {view.state:<10} {slurm:<22} {why}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    import time

    from jobs import status
    from jobs.errors import JobsError
    from lineage.store import TERMINAL

    if args.task < 0:
        raise JobsError(f"--task must be 0 or more (got {args.task})")
    store = open_store(args)
    run_id = store.index().resolve_run(args.run)
    folder = store.run_dir(run_id) / "logs"
    logs = sorted(folder.glob(f"*_{args.task}_log.*"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
    if not logs and not args.follow:
        raise JobsError(f"run {run_id} has no logs yet in {folder}")
    offsets: dict = {}
    while True:
        for path in sorted(folder.glob(f"*_{args.task}_log.*")) if folder.is_dir() else []:
            with open(path, "rb") as f:
                f.seek(offsets.get(path, 0))
                chunk = f.read()
                offsets[path] = f.tell()
            if chunk:
                if not args.follow:
                    print(f"==> {path} <==")
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
        if not args.follow:
            return 0
        view = status.lost(store.run(run_id))   # a LOST run never ends: stop following it
        if view.state in TERMINAL or view.state == "LOST":
            return 0
        time.sleep(1.0)


def cmd_cancel(args: argparse.Namespace) -> int:
    from jobs import status
    from jobs.errors import JobsError
    from lineage.store import TERMINAL

    store = open_store(args)
    view = store.run(store.index().resolve_run(args.run))
    if view.state in TERMINAL:
        raise JobsError(f"run {view.id} already ended: {view.state}")
    store.ensure_writable()
    print(f"{view.id} cancelled ({status.cancel(store, view)})")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from jobs import show

    idx = open_store(args).index()
    show.print_runs(idx.runs(recipe=args.recipe, stage=args.stage, limit=args.limit))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from jobs import show
    from lineage.errors import Corrupt

    store = open_store(args)
    idx = store.index()
    if args.id.startswith("art_") or ":" in args.id:
        art = store.resolve_artifact(args.id)
        show.print_artifact(store, idx, art)
        try:  # never show an artifact, `:latest` above all, as usable without saying its files changed
            store.verify(art)
            print("verified  ok")
        except Corrupt as e:
            print(f"verified  CORRUPT {e}")
    else:
        show.print_run(store, idx, idx.resolve_run(args.id))
    return 0


def cmd_artifacts(args: argparse.Namespace) -> int:
    from jobs import show

    idx = open_store(args).index()
    show.print_artifacts(idx, idx.artifacts(recipe=args.recipe, kind=args.kind))
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from jobs import show

    store = open_store(args)
    idx = store.index()
    print(show.lineage(store, idx, store.resolve_artifact(args.id), args.format))
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    import time

    from lineage.index import Index

    store = open_store(args)
    t0 = time.perf_counter()
    idx = Index(store)
    if args.rebuild:
        idx.rebuild()  # replaces a garbage index file too
    else:
        idx.sync()
    where = idx.path or "memory (no writable cache folder)"
    print(f"index {'rebuilt' if args.rebuild else 'synced'} in {time.perf_counter() - t0:.2f} s: {where}")
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from jobs.reproduce import reproduce

    store = open_store(args)
    run_id = store.index().resolve_run(args.run)
    store.ensure_writable()
    new_id, cmp = reproduce(store, run_id, args.allow_env_drift)
    if cmp.identical:
        print(f"reproduced bit for bit: {new_id} has the same outputs as {run_id}: "
              + " ".join(f"{n}={a[:16]}" for n, (a, _) in cmp.outputs.items()))
        return 0
    print(f"NOT reproduced: {new_id} differs from {run_id}" if not cmp.corrupt else
          f"NOT reproduced: the outputs of {new_id} or {run_id} do not verify")
    for problem in cmp.corrupt:
        print(f"  CORRUPT {problem}")
    for name, (a, b) in cmp.outputs.items():
        if a != b:
            print(f"  output {name}: {a} -> {b}")
            for change in cmp.files.get(name, []):
                print(f"    {change}")
    for k, (a, b, d) in cmp.metrics.items():
        print(f"  metric {k}: {a} -> {b} ({d:+.4g})")
    return 1


def cmd_diff(args: argparse.Namespace) -> int:
    from jobs.reproduce import diff

    store = open_store(args)
    idx = store.index()
    lines = diff(store, idx.resolve_run(args.a), idx.resolve_run(args.b))
    print("\n".join(lines) if lines else "no differences in config, code, environment, inputs or outputs")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from jobs.errors import JobsError
    from lineage.errors import Corrupt, Damaged
    from lineage.gc import verify_all

    store = open_store(args)
    if args.all:
        results = verify_all(store)  # damaged records are findings too
    elif args.id:
        art = store.resolve_artifact(args.id)
        try:
            store.verify(art)
            results = [(art, None)]
        except (Corrupt, Damaged) as e:  # reported below like --all
            results = [(art, str(e))]
    else:
        raise JobsError("say what to verify: an artifact (art_… or NAME:latest) or --all")
    bad = [(a, p) for a, p in results if p]
    for art, problem in bad:
        print(f"CORRUPT {problem}")
    print(f"verified {len(results)} artifact(s): {len(results) - len(bad)} ok, {len(bad)} corrupt")
    return 1 if bad else 0


def cmd_gc(args: argparse.Namespace) -> int:
    from jobs.show import _size
    from lineage.gc import candidates, collect

    from jobs.errors import JobsError

    if args.keep_top_k is not None and args.keep_top_k < 1:
        raise JobsError(f"--keep-top-k must be 1 or more: how many snapshots to keep per run (got {args.keep_top_k})")
    import math

    if not math.isfinite(args.older_than) or args.older_than < 0:
        raise JobsError(f"--older-than {args.older_than}: give a number of days, 0 or more")
    store = open_store(args)
    if args.keep_top_k is not None:
        return _gc_checkpoints(store, args)
    victims = candidates(store, args.older_than)
    for c in victims:
        print(f"{'delete' if args.yes else 'would delete'} {c.id[:20]} {c.kind:<12} {_size(c.size):>10} {c.age_days:5.1f} d  {c.path}")
    total = sum(c.size for c in victims)
    if not args.yes:
        print(f"{len(victims)} artifact(s), {_size(total)} nothing keeps; run `jobs gc --yes` to delete them")
        return 0
    print(f"deleted {len(victims)} artifact(s), {_size(collect(store, victims))} freed")
    return 0


def _gc_checkpoints(store, args: argparse.Namespace) -> int:
    """Training snapshots: keep the best K per run and series by a metric, delete the rest."""
    from jobs.errors import JobsError
    from lineage.gc import top_k_victims

    if not args.metric:
        raise JobsError("--keep-top-k needs --metric NAME (e.g. sft/loss; add --higher-is-better for accuracies)")
    victims = top_k_victims(store, args.keep_top_k, args.metric, args.higher_is_better)
    for v in victims:
        print(f"{'delete' if args.yes else 'would delete'} {v.run} {v.series} step {v.step} ({args.metric}={v.metrics[args.metric]:.4g})")
        if args.yes:
            for f in v.files:
                f.unlink(missing_ok=True)
    print(f"{len(victims)} snapshot(s) {'deleted' if args.yes else 'beyond the best ' + str(args.keep_top_k) + '; --yes deletes them'}")
    return 0


def cmd_pin(args: argparse.Namespace) -> int:
    store = open_store(args)
    run_id = store.index().resolve_run(args.run)
    store.add_event(run_id, "pin", pinned=not args.unpin)
    print(f"{run_id} {'unpinned' if args.unpin else 'pinned: gc keeps its outputs'}")
    return 0


def cmd_containers(args: argparse.Namespace) -> int:
    import shlex
    import shutil
    import subprocess

    from jobs import containers
    from jobs.errors import JobsError

    if args.action == "list":
        for name, image in sorted(containers.load_lock().items()):
            print(f"{name:<10} {image.reference}" + ("" if image.pinned else "   (NOT PINNED)"))
        return 0
    if not args.name:
        raise JobsError(f"`jobs containers {args.action}` needs an image name (see `jobs containers list`)")
    if args.action == "pin":
        if not args.digest:
            raise JobsError("no registry is reachable from here: pass the digest, "
                            f"`jobs containers pin {args.name} --digest sha256:…` (from `docker buildx imagetools inspect`)")
        image = containers.pin(args.name, args.digest)
        print(f"{args.name} pinned: {image.reference}")
        return 0
    image = containers.resolve(args.name)
    target = Path(args.dir).expanduser() / containers.squashfs_name(image)
    commands = containers.import_commands(image, Path(args.dir).expanduser(), srun=args.srun)
    if args.dry_run:
        print("\n".join(shlex.join(c) for c in commands))
        return 0
    if target.exists():
        print(f"{target} already holds {image.reference}")
        return 0
    if not shutil.which("enroot") and not args.srun:
        raise JobsError("enroot is not installed on this machine: run with --srun on a Slurm cluster, or --dry-run")
    for c in commands:
        subprocess.run(c, check=True)
    print(f"imported {image.reference} to {target}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    import json

    from jobs.errors import JobsError
    from lineage import exports

    store = open_store(args)
    if args.name is not None and not args.dvc:
        raise JobsError("--name goes with --dvc DIR")
    if args.out is not None and not args.openlineage:
        raise JobsError("--out goes with --openlineage")
    if args.dvc:
        dvc_file = exports.export_dvc(store, store.resolve_artifact(args.id), Path(args.dvc), args.name)
        print(f"wrote {dvc_file} (then: git add {dvc_file.name} .gitignore && dvc push)")
        return 0
    if args.openlineage:
        out = Path(args.out) if args.out else None
        if out is not None and (not out.parent.is_dir() or out.is_dir()):
            raise JobsError(f"--out {out}: {'is a folder' if out.is_dir() else 'its folder does not exist'}")
        events = exports.openlineage_events(store, store.index().resolve_run(args.id))
        text = "".join(json.dumps(e, sort_keys=True) + "\n" for e in events)
        if out is not None:
            from lineage.records import atomic_write

            atomic_write(out, text.encode())
            print(f"wrote {len(events)} OpenLineage event(s) to {args.out}")
        else:
            sys.stdout.write(text)
        return 0
    raise JobsError("say what to export: ART --dvc DIR, or RUN --openlineage [--out FILE]")


def cmd_recipes(args: argparse.Namespace) -> int:
    from jobs import recipes

    for name in recipes.available():
        r = recipes.load(name)
        print(f"{name:<8} {r.description}")
        for s in r.stages.values():
            ins = ", ".join(f"{i.role}<-{i.stage}.{i.output}" for i in s.inputs) or "-"
            outs = ", ".join(f"{k}:{v}" for k, v in s.outputs.items())
            print(f"  {s.name:<9} in: {ins}\n  {'':<9} out: {outs}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """One self-contained HTML file: lineage graph, metric curves, eval table, config, attempts."""
    from jobs import report

    path = report.write(open_store(args), args.id, Path(args.out).expanduser() if args.out else None)
    print(path)
    return 0


# ---- parser ---------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="jobs", description="Run post-training stages as batch jobs, with artifact lineage.")
    p.add_argument("--store", help=f"lineage store folder (default: $JOBS_HOME or {DEFAULT_STORE})")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("submit", help="compose, record and run a recipe's stage(s)")
    s.add_argument("recipe")
    s.add_argument("--stage", help="a stage, a comma list, or 'all'")
    s.add_argument("--stages", help="same as --stage: a comma list of stages")
    s.add_argument("--executor", default="local", help="local (default: run here, wait) or slurm (submit, return)")
    s.add_argument("--profile", help="cluster profile from ~/.config/jobs/profiles.yaml ($JOBS_PROFILES)")
    s.add_argument("--dry-run", action="store_true", help="print what would run (sbatch scripts on slurm); record nothing")
    s.add_argument("--allow-unpinned", action="store_true", help="accept container images not pinned by digest")
    s.add_argument("--force", action="store_true", help="run even if an identical run already succeeded")
    s.add_argument("--input", action="append", default=[], metavar="ROLE=ART",
                   help="use this artifact (art_… or NAME:latest|vN) for an input role; STAGE.ROLE=… for one stage")
    s.add_argument("overrides", nargs="*", help="Hydra overrides: sft.lr=1e-4 +x.y=1 ~x")
    s.set_defaults(func=cmd_submit)

    s = sub.add_parser("status", help="runs not yet ended (or one run), joined with squeue/sacct")
    s.add_argument("run", nargs="?")
    s.add_argument("--all", action="store_true", help="ended runs too")
    s.add_argument("--limit", type=int, default=200)
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("logs", help="a run's job output")
    s.add_argument("run")
    s.add_argument("-f", "--follow", action="store_true", help="keep printing until the run ends")
    s.add_argument("--task", type=int, default=0, help="which task (node) of a multi-node job")
    s.set_defaults(func=cmd_logs)

    s = sub.add_parser("cancel", help="cancel a run (scancel on Slurm)")
    s.add_argument("run")
    s.set_defaults(func=cmd_cancel)

    s = sub.add_parser("list", help="runs, newest first")
    s.add_argument("--recipe")
    s.add_argument("--stage")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(func=cmd_list)

    s = sub.add_parser("show", help="a run's or an artifact's record")
    s.add_argument("id", help="run ID (or prefix), art_… (or prefix), or NAME:latest|vN")
    s.set_defaults(func=cmd_show)

    s = sub.add_parser("artifacts", help="registered artifacts")
    s.add_argument("--recipe")
    s.add_argument("--kind")
    s.set_defaults(func=cmd_artifacts)

    s = sub.add_parser("lineage", help="an artifact's ancestry and descendants")
    s.add_argument("id")
    s.add_argument("--format", choices=["text", "mermaid", "dot"], default="text")
    s.set_defaults(func=cmd_lineage)

    s = sub.add_parser("index", help="bring the SQLite index up to date with the records")
    s.add_argument("--rebuild", action="store_true", help="drop it and read every record again")
    s.set_defaults(func=cmd_index)

    s = sub.add_parser("reproduce", help="re-run a record exactly (code, config, inputs) and compare outputs")
    s.add_argument("run")
    s.add_argument("--allow-env-drift", action="store_true", help="run even if installed packages differ from the record")
    s.set_defaults(func=cmd_reproduce)

    s = sub.add_parser("diff", help="how two runs differ: config, code, environment, inputs, outputs")
    s.add_argument("a")
    s.add_argument("b")
    s.set_defaults(func=cmd_diff)

    s = sub.add_parser("verify", help="re-hash artifacts and report corruption")
    s.add_argument("id", nargs="?")
    s.add_argument("--all", action="store_true")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("gc", help="delete artifacts nothing keeps (dry run unless --yes)")
    s.add_argument("--older-than", type=float, default=7.0, metavar="DAYS", help="retention (default 7 days)")
    s.add_argument("--yes", action="store_true", help="really delete")
    s.add_argument("--keep-top-k", type=int, metavar="K", help="prune training snapshots instead: keep the best K per run")
    s.add_argument("--metric", help="with --keep-top-k: the metric that ranks snapshots (lower is better)")
    s.add_argument("--higher-is-better", action="store_true", help="with --keep-top-k: rank by the highest metric")
    s.set_defaults(func=cmd_gc)

    s = sub.add_parser("pin", help="keep a run's outputs from gc (--unpin to release)")
    s.add_argument("run")
    s.add_argument("--unpin", action="store_true")
    s.set_defaults(func=cmd_pin)

    s = sub.add_parser("containers", help="images in containers.lock: list, pin a digest, import to squashfs")
    s.add_argument("action", choices=["list", "pin", "import"])
    s.add_argument("name", nargs="?")
    s.add_argument("--digest", help="with pin: the sha256:… digest to record")
    s.add_argument("--dir", default="~/.cache/jobs/enroot", help="with import: where squashfs images live")
    s.add_argument("--srun", action="store_true", help="with import: run enroot on a compute node through srun")
    s.add_argument("--dry-run", action="store_true", help="with import: print the commands only")
    s.set_defaults(func=cmd_containers)

    s = sub.add_parser("export", help="an artifact into a DVC repo, or a run as OpenLineage events")
    s.add_argument("id", help="ART (with --dvc) or RUN (with --openlineage)")
    s.add_argument("--dvc", metavar="DIR", help="a DVC repository to put the artifact in")
    s.add_argument("--name", help="with --dvc: the folder name in the repo")
    s.add_argument("--openlineage", action="store_true", help="print (or --out) OpenLineage RunEvents as JSON lines")
    s.add_argument("--out", help="with --openlineage: write to this file")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("recipes", help="recipes and their stages")
    s.set_defaults(func=cmd_recipes)

    s = sub.add_parser("report", help="one HTML file for a run, an artifact's lineage or a recipe: graph, curves, evals")
    s.add_argument("id", help="run ID (or prefix), art_… or NAME:latest|vN, or a recipe name (its newest run per stage)")
    s.add_argument("-o", "--out", help="the HTML file to write (default: ./report-<ID>.html)")
    s.set_defaults(func=cmd_report)
    return p


def main(argv: list[str] | None = None) -> int:
    from jobs.errors import JobsError
    from lineage.errors import LineageError

    parser = build_parser()
    # Overrides may come before or after options (`submit tiny x=1 --stage a y=2`); argparse alone
    # would stop collecting positionals at the first option, so the leftovers are taken here.
    args, extra = parser.parse_known_args(argv)
    unknown = [x for x in extra if x.startswith("-") or args.command != "submit"]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "submit":
        args.overrides = [*args.overrides, *extra]
    try:
        return args.func(args)
    except (JobsError, LineageError) as e:
        sys.stderr.write(f"jobs: error: {_one_line(str(e))}\n")
        return 2
    except OSError as e:  # a file the command needs cannot be read or written (a read-only store...): name it
        if isinstance(e, BrokenPipeError):
            return 0
        where = f": {e.filename}" if e.filename else ""
        sys.stderr.write(f"jobs: error: {_one_line((e.strerror or str(e)) + str(where))}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("jobs: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


def _one_line(text: str) -> str:
    """The CLI's promise is one line on stderr: a control character from a path or value is escaped."""
    return text if text.isprintable() else repr(text)[1:-1]


if __name__ == "__main__":
    raise SystemExit(main())
