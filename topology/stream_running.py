"""Running a :class:`~topology.stream.Stream`: its plan (``plan``, ``explain``), a run to the
end (``collect``), the Spark sinks (``to_spark``, ``write``, ``to_spark_stream``) and a live
query (``deploy``) -- the methods that hand the logical tree to the planner and the runtimes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from topology.building import nodes as n
from topology.building.checks import (
    check_flag,
    check_fuse,
    check_query_name,
    check_runtime,
    fuse_level,
)
from topology.building.times import time_fields
from topology.spark.held_runs import held_runs, spark_streams

if TYPE_CHECKING:
    from topology.planning.planner import Plan
    from topology.running.inline import Collected, RunReport
    from topology.running.query import Query


class Running:
    """What runs a :class:`~topology.stream.Stream` (a base class of it)."""

    __slots__ = ()
    _node: n.Node

    def plan(self, fuse: bool | str = False) -> Plan:
        """The stages this query runs as (:mod:`topology.planning.planner`), fused at level ``fuse``
        (False, True, ``"stateless"``, ``"chains"`` or ``"all"``: docs/runtime.md)."""
        from topology.planning.planner import plan

        fuse_level("plan", fuse)
        return plan(self._node, fuse=fuse)

    def explain(self, fuse: bool | str = False, stages: bool = True) -> str:
        """The logical plan (step ids and arguments), and with ``stages`` the physical one."""
        from topology.planning.planner import assign_steps, explain_tree

        fuse_level("explain", fuse)
        check_flag("explain", "stages", stages)
        if stages:
            return self.plan(fuse).explain()
        return explain_tree(self._node, assign_steps(self._node))

    def collect(self, runtime: str = "ray", *, fuse: bool | str | None = None,
                batch_size: int | None = None, trace: Any = None, columns: bool = False,
                commit: bool = True, **options: Any) -> Collected:
        """Run the query to the end of its sources and return the output messages
        (``columns=True``: the output's column batches as :class:`~operators.columns.Columns`,
        each standing for its inserts, instead of one ``Insert`` per event).

        The result is a list with what the run did not output as attributes
        (:class:`topology.running.inline.Collected`): ``dead_letters`` (the inputs no step could
        process, each with its reason), ``late`` (the events sources dropped or adjusted by
        their late-event policy) and ``accounting`` (per source, ``received == processed +
        dropped + adjusted + dead_lettered``). A run with dead letters warns once
        (:class:`topology.running.inline.DeadLetterWarning`) with their count and where to read
        them.

        ``runtime="ray"`` connects to Ray (or starts a local instance), deploys one actor per
        stage, feeds the sources, drains and tears the actors down; ``runtime="inline"`` runs
        the same plan in this process. ``options`` go to the Ray runtime
        (:func:`topology.running.deploy.deploy_plan`). ``trace`` (a directory, or an
        :class:`topology.Trace` with bounds) records the messages entering and leaving
        every step as parquet; read it with ``Trace.open(path)`` or ``cedar debug PATH``.
        ``fuse`` (on Ray): by default each chain of single-input steps in one actor (see
        :meth:`_ray_plan`); ``True`` only stateless steps into the stage before them,
        ``"all"`` each connected part, ``False`` one actor per step (docs/runtime.md,
        "Fusion").

        Over a streaming ``from_spark(..., checkpoint=PATH)`` the run is committed only when
        ``collect()`` returns its output, as its last act: a run that fails or is killed
        before commits nothing, and the next ``collect()`` delivers its events again
        (docs/spark.md). With ``commit=False`` the run stays held after ``collect()``
        returned, until the caller, having stored the rows, calls ``out.commit()``; a run
        killed before that is delivered again by the next ``collect()``, under the same
        ``out.run`` (the run's token: store the rows under it, replacing what is there, and
        no kill anywhere loses or duplicates a row).
        """
        check_runtime("collect", runtime)
        check_fuse("collect", fuse)
        if not isinstance(commit, bool):
            raise TypeError(f"collect(commit={commit!r}): give True or False")
        with held_runs(self._node) as held:
            out = self._run(runtime, fuse=fuse, batch_size=batch_size, trace=trace,
                            columns=columns, **options)
            out.report.warn("collect()", "collect(...).", stacklevel=2)
            out.run = held.run
            if not commit:
                out.commit = held.later()  # type: ignore[method-assign]
            else:
                held()  # the commit: nothing between it and the hand-over
        return out

    def _run(self, runtime: str, *, fuse: bool | str | None = None,
             batch_size: int | None = None, trace: Any = None, columns: bool = False,
             **options: Any) -> Collected:
        """:meth:`collect`'s run, with no commit of a streaming source and no warning."""
        if runtime == "inline":
            from actors.config import ShellConfig
            from actors.recorder import TraceSettings
            from topology.running.inline import run_inline

            size = ShellConfig.of(batch_size=batch_size).batch_size  # a bad one fails here
            return run_inline(self.plan(False if fuse is None else fuse), size,
                              trace=TraceSettings.of(trace), columns=columns)
        from topology.running.deploy import collect_plan

        if batch_size is not None:
            options["batch_size"] = batch_size
        return collect_plan(self._ray_plan(fuse, trace), trace=trace, columns=columns,
                            **options)

    def _ray_plan(self, fuse: bool | str | None, trace: Any = None) -> Plan:
        """The plan a run to the end on Ray executes: by default (``fuse=None``) each chain
        of single-input steps in one actor (``"chains"``: a source, its filters, a keyed
        window, a select), as Flink chains its operators, since a hop between actors costs
        more than most steps (a batch serialised, copied and decoded); one actor per step
        with ``fuse=False``, or when ``trace`` records each step by its id."""
        return self.plan(("chains" if trace is None else False) if fuse is None else fuse)

    # -- Spark sinks ------------------------------------------------------------------------
    def to_spark(self, spark: Any = None, runtime: str = "ray", staging: str | None = None,
                 **options: Any) -> Any:
        """Run the query and return its output CHT as a Spark DataFrame: ``start`` and ``end``
        timestamps (∞ as null) plus the payload's fields (a scalar payload is ``value``).
        Column batches of the output stay columns on the way to Spark, staged as parquet parts
        under ``staging`` (:func:`topology.spark.sink.to_spark`). The DataFrame's
        ``run_report`` (:class:`topology.running.inline.RunReport`) holds the run's dead
        letters, late events and accounting; dead letters also warn, as in :meth:`collect`. A
        streaming ``from_spark`` with a checkpoint is committed once the DataFrame is made."""
        from topology.spark.sink import to_spark

        check_runtime("to_spark", runtime)
        with held_runs(self._node) as commit:
            out = self._run(runtime, columns=True, **options)
            df = to_spark(spark, out, staging=staging, times=time_fields(self._node))
            commit()
        out.report.warn("to_spark()", "to_spark(...).run_report.", stacklevel=2)
        return df

    def write(self, path: str, format: str = "parquet", mode: str = "error", spark: Any = None,
              runtime: str = "ray", staging: str | None = None, **options: Any) -> RunReport:
        """Run the query and write its output CHT through Spark (see :meth:`to_spark`);
        returns the run's :class:`topology.running.inline.RunReport` (dead letters, late events,
        accounting), and warns on dead letters. A streaming ``from_spark`` with a checkpoint
        is committed once the files are written."""
        from topology.spark.sink import WRITE_MODES, write

        check_runtime("write", runtime)
        if mode not in WRITE_MODES:  # (write checks it too, but only after the run)
            raise ValueError(f"write(mode={mode!r}): mode must be one of {WRITE_MODES}")
        with held_runs(self._node) as commit:
            out = self._run(runtime, columns=True, **options)
            write(spark, out, path, format=format, mode=mode, staging=staging,
                  times=time_fields(self._node))
            commit()
        report = out.report
        report.warn("write()", "write(...).", stacklevel=2)
        return report

    def to_spark_stream(self, path: str, format: str = "parquet", spark: Any = None,
                        runtime: str = "ray", **options: Any) -> Any:
        """Run the query and append, at each output CTI, the rows that CTI made final to
        ``path``, exactly once across restarts (:class:`topology.spark.sink.FinalRowsSink`: a
        restarted run on the same path skips what was committed). On Ray the rows are
        appended while the query runs. Returns the sink (``committed``, ``dead_letters``).

        Over a streaming ``from_spark`` with a checkpoint the source's run is held until the
        sink has committed it, so that a run that dies is replayed whole and the pair is
        exactly once end to end (docs/spark.md)."""
        from topology.spark.sink import FinalRowsSink

        check_runtime("to_spark_stream", runtime)
        resumed = [s for s in spark_streams(self._node) if s.checkpoint is not None]
        run = sum(s.hold() for s in resumed) if resumed else None
        try:
            sink = FinalRowsSink(spark, path, format=format, run=run,
                                 times=time_fields(self._node))
            if runtime == "inline":
                sink.on_messages(self._run("inline", **options))
            else:
                from topology.running.deploy import collect_plan

                fuse = options.pop("fuse", None)
                check_fuse("to_spark_stream", fuse)
                collect_plan(self._ray_plan(fuse, options.get("trace")),
                             on_messages=sink.on_messages, **options)
            sink.end()
            for s in resumed:
                s.commit_run()
        finally:  # a failed run stays held on disk, for the next run to replay
            for s in resumed:
                s.held, s.last = False, None
        return sink

    def deploy(self, name: str, *, fuse: bool | str = False, trace: Any = None,
               **options: Any) -> Query:
        """Start the query on Ray under ``name`` and return its live :class:`Query` handle;
        the sources are fed in the background. ``trace`` records every step's messages, as
        in :meth:`collect`. ``name`` is letters, digits and ``- _ .``, starting with a letter,
        a digit or ``_`` (it names the query's actors and its checkpoint folder).

        ``fuse`` runs several steps in one actor: False (the default) one actor per step;
        True or ``"stateless"`` the stateless steps in the stage before them; ``"chains"``
        every run of single-input steps (a source, its filters, a keyed window, a select) in
        one actor; ``"all"`` each connected part of the query in one actor (its sink and a
        partitioned group_apply's partitions apart). Fewer actors cost fewer hops and less
        idle CPU, and run in parallel less (docs/runtime.md, "Fusion").

        ``restore=PATH`` starts from a savepoint that ``Query.stop(savepoint=PATH)`` wrote
        (with ``checkpoint_dir=``; docs/operations.md, "Savepoints"); the other options are
        :func:`~topology.running.deploy.deploy_plan`'s."""
        from topology.running.deploy import deploy_plan

        check_query_name(name, "deploy")
        fuse_level("deploy", fuse)
        query = deploy_plan(self.plan(fuse), name, trace=trace, **options)
        query.deployed_as = (self, {"fuse": fuse, "trace": trace, **options})
        return query

    def with_partitions(self, partitions: int, step: str | None = None) -> Any:
        """The same query, its ``group_apply(..., key_groups=G)`` (the one of step id
        ``step``, or the only one) at ``partitions`` (1 to G): what a savepoint of this
        query restores into as a rescale (docs/operations.md, "Rescaling")."""
        import dataclasses

        from topology.planning.planner import assign_steps

        steps = assign_steps(self._node)
        grouped = {id(node): s for node, s in steps.values()
                   if isinstance(node, n.GroupApply) and node.groups}
        if step is not None:
            grouped = {k: s for k, s in grouped.items() if s == step}
        if len(grouped) != 1:
            said = f"step {step!r} is no" if step is not None else (
                "the query has no" if not grouped else
                f"the query has {len(grouped)} (give step=, one of "
                f"{sorted(grouped.values())}): a")
            raise ValueError(f"with_partitions(partitions={partitions}): {said} group_apply "
                             f"that keeps its state by key group (partitions > 1 or "
                             f"key_groups=), which is what rescales")
        target = next(iter(grouped))
        done: dict[int, n.Node] = {}

        def rebuilt(node: n.Node) -> n.Node:
            if id(node) not in done:
                inputs = tuple(rebuilt(i) for i in node.inputs)
                changed: dict[str, Any] = {"inputs": inputs} if inputs != node.inputs else {}
                if id(node) == target:
                    changed["partitions"] = partitions
                done[id(node)] = dataclasses.replace(node, **changed) if changed else node
            return done[id(node)]

        return type(self)(rebuilt(self._node))  # type: ignore[call-arg]  # (a Stream)
