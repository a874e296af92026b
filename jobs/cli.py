"""`jobs`: submit recipe stages and query the lineage store.

The CLI parses and prints; each command's work lives in the module it names. Only the standard
library is imported at start (`jobs --help` stays fast); a command imports what it needs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other bad input
        sys.stderr.write(f"jobs: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


class _Version(argparse.Action):
    """`jobs --version`: the installed version and where its code is, read only when asked."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, help="print the version and the code's folder, and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("jobs")
        except PackageNotFoundError:
            number = "(not installed)"
        print(f"jobs {number} ({Path(__file__).resolve().parent.parent})")
        parser.exit()


def open_store(args: argparse.Namespace):
    from jobs.submit import store_root
    from lineage import Store

    return Store.open(store_root(args.store))


# Commands that only hand their arguments to the module that does the work, imported when the
# command runs (`jobs --help` stays fast).

def cmd_index(args: argparse.Namespace) -> int:
    from jobs import maintenance
    return maintenance.index(open_store(args), args.rebuild)


def cmd_reproduce(args: argparse.Namespace) -> int:
    from jobs import reproduce
    return reproduce.command(open_store(args), args.run, args.allow_env_drift, args.no_wait, args.compare)


def cmd_verify(args: argparse.Namespace) -> int:
    from jobs import maintenance
    return maintenance.verify(open_store(args), args.id, args.all)


def cmd_pin(args: argparse.Namespace) -> int:
    from jobs import maintenance
    return maintenance.pin(open_store(args), args.run, args.unpin)


def cmd_containers(args: argparse.Namespace) -> int:
    from jobs import containers
    return containers.command(args.action, args.name, args.digest, args.dir, args.srun, args.dry_run, args.runtime, args.image)


def cmd_export(args: argparse.Namespace) -> int:
    from jobs import export
    return export.command(open_store(args), args.id, args.dvc, args.name, args.openlineage, args.out)


def cmd_submit(args: argparse.Namespace) -> int:
    from jobs.errors import ExecutorError
    from jobs.submit import Request, submit

    if not args.stage:
        raise ExecutorError("say which stage(s) to run: --stage STAGE, --stage a,b, or --stage all")
    items = [x.strip() for text in args.stage for x in text.split(",") if x.strip()]
    stages = "all" if "all" in items else ",".join(items)   # `--stage a --stage b` is `--stage a,b`
    req = Request(recipe=args.recipe, stages=stages, overrides=args.overrides, inputs=args.input,
                  executor=args.executor, profile=args.profile, store=args.store, dry_run=args.dry_run,
                  force=args.force, allow_unpinned=args.allow_unpinned, sweep=args.sweep,
                  max_parallel=args.max_parallel)
    return 0 if submit(req).ok else 1


def cmd_status(args: argparse.Namespace) -> int:
    from jobs import status
    from lineage.sweeps import is_sweep
    if args.run and is_sweep(args.run):
        from jobs import sweep
        lines = sweep.status(open_store(args), args.run, args.json, args.jsonl)
    else:
        lines = status.table(open_store(args), args.run, args.all, args.limit, args.json, args.jsonl)
    if lines:   # --jsonl of nothing: no line at all
        print("\n".join(lines))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from jobs import logs
    from jobs.errors import JobsError

    if args.task < 0:
        raise JobsError(f"--task must be 0 or more (got {args.task})")
    store = open_store(args)
    logs.follow_logs(store, store.index().resolve_run(args.run), args.task, args.follow)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from jobs import cancel
    from lineage.sweeps import is_sweep
    if is_sweep(args.run):
        from jobs import sweep
        print("\n".join(sweep.cancel(open_store(args), args.run)))
        return 0
    print(cancel.cancel_run(open_store(args), args.run))
    return 0


def not_utf8(argv: list[str]) -> str | None:
    """The first argument (or store path from $JOBS_HOME) that is not valid UTF-8, as a message."""
    import os

    for where, text in [*(("argument", a) for a in argv), ("$JOBS_HOME", os.environ.get("JOBS_HOME", ""))]:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            shown = ascii(text.encode("utf-8", "surrogateescape"))[2:-1]
            return f"{where} '{shown}' is not valid UTF-8: records are UTF-8 JSON, so use UTF-8 names and values"
    return None


def cmd_list(args: argparse.Namespace) -> int:
    from jobs import show
    from jobs.filters import check_failed, check_limit, check_runs_filter

    check_limit(args.limit)
    store = open_store(args)
    check_runs_filter(store.index(), args.recipe, args.stage)
    if args.failed is not None:   # runs that failed in this class (jobs/triage.py)
        from jobs import triage

        check_failed(args.failed)
        show.print_runs(triage.failed_runs(store.index(), args.failed, args.recipe, args.stage, args.limit),
                        args.json, store=store, metric=args.metric, lines=args.jsonl)
        return 0
    if args.sweep is not None:
        from jobs import sweep
        if args.sweep == "":
            print("\n".join(sweep.sweeps_table(store)))
        else:
            show.print_runs(sweep.run_rows(store, args.sweep), args.json, store=store, metric=args.metric,
                            lines=args.jsonl)
        return 0
    show.print_runs(store.index().runs(recipe=args.recipe, stage=args.stage, limit=args.limit), args.json,
                    store=store, metric=args.metric, lines=args.jsonl)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from jobs.filters import check_limit

    check_limit(args.limit)   # as `list` and `status` refuse it, whatever is compared
    from lineage.sweeps import is_sweep
    if len(args.runs) == 1 and is_sweep(args.runs[0]):   # a sweep: its grid, the best point marked
        from jobs import sweep
        return sweep.compare_command(open_store(args), args.runs[0], args.metric[-1] if args.metric else None, args.json)
    from jobs import compare
    return compare.command(open_store(args), args.runs, args.stage, args.metric, args.limit, args.json)


def cmd_show(args: argparse.Namespace) -> int:
    from jobs import show
    if args.cost:
        show.print_cost(open_store(args), args.id, args.json)
    else:
        show.print_record(open_store(args), args.id, args.json)
    return 0


def cmd_artifacts(args: argparse.Namespace) -> int:
    from jobs import show
    from jobs.filters import check_artifacts_filter

    idx = open_store(args).index()
    check_artifacts_filter(idx, args.recipe, args.kind)
    show.print_artifacts(idx, idx.artifacts(recipe=args.recipe, kind=args.kind), args.json, args.jsonl)
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from jobs import show
    from jobs.errors import JobsError

    store = open_store(args)
    fmt = "json" if args.json else args.format
    if args.id.startswith("art_") or ":" in args.id:
        arts = [store.resolve_artifact(args.id)]
    else:   # a run ID (or prefix): the lineage of its outputs
        if not all(c in "0123456789abcdef-" for c in args.id.lower()):
            raise JobsError(f"{args.id!r} is neither an artifact ID (art_…), an alias (name:latest, name:vN) "
                            "nor a run ID (see `jobs artifacts`, `jobs list`)")
        run = store.index().resolve_run(args.id)
        outputs = store.run(run).outputs
        if not outputs:
            raise JobsError(f"run {run} has no outputs (yet): its lineage starts at its outputs; `jobs show {run}` "
                            "lists its inputs")
        if len(outputs) > 1 and fmt in ("mermaid", "dot"):
            raise JobsError(f"run {run} has {len(outputs)} outputs, one picture each: name one of "
                            + ", ".join(f"{k}={v[:16]}" for k, v in sorted(outputs.items())))
        if fmt == "json":   # one document: the run, and each output's graph by its name
            show.print_json({"run": run, "outputs": {k: show.lineage(store, store.index(), outputs[k], fmt)
                                                     for k in sorted(outputs)}})
            return 0
        arts = [outputs[k] for k in sorted(outputs)]
    if fmt == "json":
        show.print_json(show.lineage(store, store.index(), arts[0], fmt))
        return 0
    print("\n\n".join(show.lineage(store, store.index(), a, fmt) for a in arts))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from jobs.compare import diff_command
    return diff_command(open_store(args), args.a, args.b)   # exit 1 when they differ, like diff(1)


def cmd_gc(args: argparse.Namespace) -> int:
    from jobs import maintenance
    if args.keep_top_k is not None:
        return maintenance.prune_snapshots(open_store(args), args.keep_top_k, args.metric, args.higher_is_better, args.yes)
    return maintenance.gc(open_store(args), args.older_than, args.yes)


def cmd_add(args: argparse.Namespace) -> int:
    from jobs.add import add
    from jobs.submit import store_root

    done = add(store_root(args.store), args.path, args.kind, args.name, args.source, args.revision)
    use = f"(use: --input ROLE={done.name}:v{done.version})"
    if not done.new_version:
        print(f"{done.artifact}  {args.kind}  {done.name}:v{done.version} already holds these bytes: nothing added {use}")
    elif not done.copied:
        print(f"{done.artifact}  {args.kind}  {done.name}:v{done.version} (the store held these bytes already: "
              f"no second copy) {use}")
    else:
        print(f"{done.artifact}  {args.kind}  {done.name}:v{done.version} {use}")
    return 0


def cmd_recipes(args: argparse.Namespace) -> int:
    from jobs import recipes
    print(recipes.describe())
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from jobs import report
    from lineage.sweeps import is_sweep
    if is_sweep(args.id):
        from jobs import sweep
        print(sweep.report(open_store(args), args.id, Path(args.out).expanduser() if args.out else None))
        return 0
    print(report.write(open_store(args), args.id, Path(args.out).expanduser() if args.out else None))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="jobs", description="Run post-training stages as batch jobs, with artifact lineage.")
    p.add_argument("--version", action=_Version)
    p.add_argument("--store", help="lineage store folder (default: $JOBS_HOME, the profile's store, or ~/.jobs)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, func, help: str, *args: tuple) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help)
        for flags, kw in args:
            s.add_argument(*flags, **kw)
        s.set_defaults(func=func)
        return s

    def a(*flags: str, **kw) -> tuple:
        return flags, kw

    flag = dict(action="store_true")
    as_json = a("--json", **flag, help="one JSON document (a list of rows for list, artifacts, status), stable keys; "
                                       "a number that is not finite is null")
    as_jsonl = a("--jsonl", **flag, help="JSON Lines: one JSON object per row and line, for a stream")
    command("submit", cmd_submit, "compose, record and run a recipe's stage(s)",
            a("recipe"), a("--stage", action="append", help="a stage, a comma list (a,b), or 'all'; repeated: all of them"),
            a("--executor", default="local", help="local (default: run here, wait) or slurm (submit, return)"),
            a("--profile", help="cluster profile from ~/.config/jobs/profiles.yaml ($JOBS_PROFILES)"),
            a("--dry-run", **flag, help="print what would run (sbatch scripts on slurm); record nothing"),
            a("--allow-unpinned", **flag, help="accept container images not pinned by digest"),
            a("--force", **flag, help="run even if an identical run already succeeded"),
            a("--input", action="append", default=[], metavar="ROLE=ART",
              help="use this artifact (art_… or NAME:latest|vN, or SWEEP:best[METRIC]) for an input role; STAGE.ROLE=… for one stage"),
            a("--sweep", action="append", default=[], metavar="KEY=V1,V2",
              help="run the stage over these values (also range(a,b), choice(a,b)); several: their grid"),
            a("--max-parallel", type=int, metavar="N", help="with --sweep: at most N points at once (Slurm: array %%N)"),
            a("overrides", nargs="*", help="Hydra overrides: sft.lr=1e-4 +x.y=1 ~x"))
    command("status", cmd_status, "runs not yet ended (or one run), joined with squeue/sacct",
            a("run", nargs="?"), a("--all", **flag, help="ended runs too"), a("--limit", type=int, default=200), as_json, as_jsonl)
    command("logs", cmd_logs, "a run's job output", a("run"),
            a("-f", "--follow", **flag, help="keep printing until the run ends"),
            a("--task", type=int, default=0, help="which task (node) of a multi-node job"))
    command("cancel", cmd_cancel, "cancel a run (scancel on Slurm)", a("run"))
    command("list", cmd_list, "runs, newest first, with how long each ran", a("--recipe"), a("--stage"),
            a("--limit", type=int, default=50), a("--metric", help="add a column: this metric's last value (e.g. eval/exact_match)"),
            as_json, as_jsonl, a("--sweep", nargs="?", const="", metavar="SWEEP", help="a sweep's runs (alone: every sweep)"),
            a("--failed", metavar="CLASS", help="FAILED runs whose failure is of this class (preempted, node_failure, "
                                                "time_limit, out_of_memory, environment, config_refused, bad_input, "
                                                "code_error, gate)"))
    command("show", cmd_show, "a run's or an artifact's record",
            a("id", help="run ID (or prefix), art_… (or prefix), or NAME:latest|vN"), as_json,
            a("--cost", **flag, help="what it cost: queued, phases, elapsed, CPU and GPU hours, max RSS, per run "
                                     "of its whole ancestry (every attempt) and in total"))
    command("artifacts", cmd_artifacts, "registered artifacts", a("--recipe"), a("--kind"), as_json, as_jsonl)
    command("lineage", cmd_lineage, "an artifact's ancestry and descendants",
            a("id"), a("--format", choices=["text", "mermaid", "dot", "json"], default="text"), as_json)
    command("index", cmd_index, "bring the SQLite index up to date with the records",
            a("--rebuild", **flag, help="drop it and read every record again"))
    command("reproduce", cmd_reproduce,
            "re-run a record exactly (code, config, inputs, image) where it ran, and compare outputs",
            a("run"), a("--allow-env-drift", **flag,
                        help="run even if the image pin or installed packages differ from the record (recorded as drift)"),
            a("--no-wait", **flag, help="a Slurm run: return once the reproduction is submitted"),
            a("--compare", **flag, help="RUN is an ended reproduction (from --no-wait): compare it with its original"))
    command("diff", cmd_diff, "how two runs differ: config, code, environment, image, inputs, outputs, metrics (exit 1 when they do)",
            a("a"), a("b"))
    command("compare", cmd_compare,
            "a table of runs: the config keys that differ between them, and their metrics; a sweep's grid and best point",
            a("runs", nargs="+", metavar="RUN|RECIPE|SWEEP",
              help="two or more run IDs (or prefixes), a recipe: its newest runs, or a sweep (swp_…): every point"),
            a("--stage", help="with a RECIPE: only this stage's runs"),
            a("--metric", action="append", help="only these metrics (repeat the flag); default: every metric but timings"),
            a("--limit", type=int, default=20, help="with a RECIPE: its newest N runs (default 20)"), as_json)
    command("verify", cmd_verify, "re-hash artifacts and report corruption", a("id", nargs="?"), a("--all", **flag))
    command("gc", cmd_gc, "delete artifacts nothing keeps (dry run unless --yes)",
            a("--older-than", type=float, default=7.0, metavar="DAYS", help="retention (default 7 days)"),
            a("--yes", **flag, help="really delete"),
            a("--keep-top-k", type=int, metavar="K", help="prune training snapshots instead: keep the best K per run"),
            a("--metric", help="with --keep-top-k: the metric that ranks snapshots (lower is better)"),
            a("--higher-is-better", **flag, help="with --keep-top-k: rank by the highest metric"))
    command("pin", cmd_pin, "keep a run's outputs from gc (--unpin to release)", a("run"), a("--unpin", **flag))
    command("containers", cmd_containers,
            "images in containers.lock: list, pin a digest, import to squashfs",
            a("action", choices=["list", "pin", "import"]), a("name", nargs="?"),
            a("--digest", help="with pin: the sha256:… digest to record"),
            a("--image", help="with pin: also set the entry's registry/repo:tag"),
            a("--runtime", choices=["pyxis", "charliecloud"], default="pyxis",
              help="with import: enroot for pyxis (default), or ch-image + ch-convert for Charliecloud"),
            a("--dir", help="with import: where squashfs images live (default ~/.cache/jobs/enroot or ~/.cache/jobs/charliecloud)"),
            a("--srun", **flag, help="with import --runtime pyxis: run enroot on a compute node through srun"),
            a("--dry-run", **flag, help="with import --runtime pyxis: print the commands only"))
    command("export", cmd_export, "an artifact into a DVC repo, or a run as OpenLineage events",
            a("id", help="ART (with --dvc) or RUN (with --openlineage)"),
            a("--dvc", metavar="DIR", help="a DVC repository to put the artifact in"),
            a("--name", help="with --dvc: the folder name in the repo"),
            a("--openlineage", **flag, help="print (or --out) OpenLineage RunEvents as JSON lines"),
            a("--out", help="with --openlineage: write to this file"))
    command("add", cmd_add, "register a file or folder you have (a base model, a data set) as an artifact",
            a("path"), a("--kind", required=True, help="the artifact kind a stage reads: model, sft-data, corpus, ..."),
            a("--name", required=True, help="its name, e.g. base/qwen3-0.6b; then --input ROLE=NAME:latest"),
            a("--source", help="where it came from (a URL)"), a("--revision", help="the source's revision or commit"))
    command("recipes", cmd_recipes, "recipes and their stages")
    command("report", cmd_report, "one HTML file for a run, an artifact's lineage or a recipe: graph, curves, evals",
            a("id", help="run ID (or prefix), art_… or NAME:latest|vN, or a recipe name (its newest consistent chain of successful runs)"),
            a("-o", "--out", help="the HTML file to write (default: ./report-<ID>.html)"))
    return p


def main(argv: list[str] | None = None) -> int:
    from containers import LockError
    from jobs.errors import JobsError, one_line
    from lineage.errors import LineageError

    parser = build_parser()
    if "_ARGCOMPLETE" in __import__("os").environ:  # the shell asks for completions (jobs/shell.py)
        from jobs.completion import complete
        complete(parser)
    bad = not_utf8(sys.argv[1:] if argv is None else list(argv))
    if bad:
        sys.stderr.write(f"jobs: error: {bad}\n")
        return 2
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
    except (JobsError, LineageError, LockError) as e:
        sys.stderr.write(f"jobs: error: {one_line(str(e))}\n")
        return 2
    except BrokenPipeError:
        return 0
    except OSError as e:  # a file the command needs cannot be read or written (a read-only store...): name it
        where = f": {e.filename}" if e.filename else ""
        sys.stderr.write(f"jobs: error: {one_line((e.strerror or str(e)) + str(where))}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("jobs: interrupted\n")
        return 130



if __name__ == "__main__":
    raise SystemExit(main())
