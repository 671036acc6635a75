"""What a table gained between two versions: the data files holding the rows its commits added.

Transform, bodies and the other stages consume tables incrementally. Delta's change data feed would
need writer protocol 4 (our tables stay at 1/2 so every engine can write them), so increments come from
the commit log itself: the ``add`` actions with ``dataChange: true`` of versions (after, upto]. A
compaction re-adds rows with ``dataChange: false``; a delete (retention, ``erase``) re-adds the kept
rows of the files it rewrote with ``dataChange: true``: neither adds new rows. When either removes a
file the range added, the rows it kept are in its own files, which the increment names instead
(``_new_files``). Works for tables written by either engine: the log format is the same.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import unquote

from queuelake.errors import LakeError
from queuelake.lake.deletes import is_delete
from queuelake.lake.reading import local_paths
from queuelake.lake.storage import delta_table, filesystem, options_for, read_retrying
from queuelake.report import log

# the journal column whose statistics tell which rewritten files can hold a slice's rows (a row keeps it)
DRAINED_AT = "drained_at"
_STATS_SLACK = dt.timedelta(seconds=1)


def _absolute(table_uri: str, path: str) -> str:
    if "://" in path:
        return path
    return table_uri.rstrip("/") + "/" + unquote(path)


def snapshot_files(table_uri: str, version: int, storage_options: dict[str, str] | None = None) -> list[str]:
    """Every data file of the table as of a version, sorted (a stable order for batching).
    ``storage_options`` default: those of the lake the table is in (registered by its engine)."""
    options = storage_options if storage_options is not None else options_for(table_uri)
    table = delta_table(table_uri, version, options)
    return sorted(local_paths(table, table.file_uris()))


class Span(NamedTuple):
    """Versions (after, upto] a stage takes as one increment, committed under ``upto``.

    ``files`` and ``batches`` are set on a slice of a first run over a history a delete or a compaction
    rewrote (``slices``): the files those versions added may be gone, so their rows are read from the
    files that hold them now, keeping the rows of those versions' batch ids only."""

    after: int | None
    upto: int
    files: tuple[str, ...] | None = None
    batches: tuple[str, ...] | None = None
    # the first and last ``drained_at`` of its rows (with ``files``): row groups beyond them are not read
    drained: tuple[dt.datetime, dt.datetime] | None = None


@dataclass(frozen=True)
class _Commit:
    """One commit's actions that increments care about."""

    version: int
    delete: bool  # a DELETE (retention, erase): its adds are the kept rows of the files it rewrote
    adds: list[str]  # paths added with dataChange: true
    rearranged: list[str]  # paths added with dataChange: false (a compaction: the same rows, regrouped)
    removes: list[str]
    rows: int | None  # rows the dataChange adds hold (None: an add without statistics)
    batches: list[tuple[str, int]]  # its application transactions (appId, version): each app's highest
    # each added file's (dataChange or not) first and last ``drained_at``, from its statistics (None: none)
    drained: dict[str, tuple[dt.datetime, dt.datetime] | None]
    operation: str | None = None  # its commitInfo's (WRITE, MERGE, UPDATE, ...), None without one


def _read_text(fs: Any, path: str) -> str:
    with fs.open_input_stream(path) as stream:
        return str(stream.read().decode("utf-8"))


def _commits(table_uri: str, after: int | None, upto: int, storage_options: dict[str, str] | None) -> list[_Commit]:
    """The commits (after, upto] from the log; LakeError when one is no longer there (log retention)."""
    fs, root = filesystem(table_uri, storage_options)
    root = root.rstrip("/")
    out: list[_Commit] = []
    for version in range((after + 1) if after is not None else 0, upto + 1):
        try:
            path = f"{root}/_delta_log/{version:020d}.json"
            text = read_retrying(functools.partial(_read_text, fs, path), "the Delta log")
        except FileNotFoundError:
            raise LakeError(
                f"{table_uri}: commit {version} is no longer in the Delta log (log retention); "
                "the increment cannot be computed. Run transform/publish more often than the log retention."
            ) from None
        actions = [json.loads(line) for line in text.splitlines() if line.strip()]
        adds: list[str] = []
        rearranged: list[str] = []
        removes: list[str] = []
        batches: list[tuple[str, int]] = []
        rows: int | None = 0
        drained: dict[str, tuple[dt.datetime, dt.datetime] | None] = {}
        for action in actions:
            if "add" in action:
                add = action["add"]
                stats = json.loads(add.get("stats") or "{}")
                drained[add["path"]] = _drained_range(stats)
                if add.get("dataChange", True):
                    adds.append(add["path"])
                    count = stats.get("numRecords")
                    rows = None if count is None or rows is None else rows + int(count)
                else:
                    rearranged.append(add["path"])
            elif "remove" in action:
                removes.append(action["remove"]["path"])
            elif "txn" in action:
                batches.append((str(action["txn"].get("appId")), int(action["txn"].get("version") or 0)))
        delete = any(is_delete(a.get("commitInfo") or {}) for a in actions)
        operation = next((str(a["commitInfo"].get("operation")) for a in actions if a.get("commitInfo")), None)
        out.append(_Commit(version, delete, adds, rearranged, removes, rows, batches, drained, operation))
    return out


def _drained_range(stats: dict[str, Any]) -> tuple[dt.datetime, dt.datetime] | None:
    """A file's first and last ``drained_at`` from its add's statistics, widened by a second each way (a
    writer may cut a statistic's precision); None without them."""
    try:
        low = dt.datetime.fromisoformat(stats["minValues"][DRAINED_AT])
        high = dt.datetime.fromisoformat(stats["maxValues"][DRAINED_AT])
    except (KeyError, TypeError, ValueError):
        return None
    return low - _STATS_SLACK, high + _STATS_SLACK


def _new_files(table_uri: str, commits: list[_Commit], storage_options: dict[str, str] | None = None) -> list[str]:
    return _increment(table_uri, commits, storage_options)[0]


def _increment(
    table_uri: str, commits: list[_Commit], storage_options: dict[str, str] | None = None
) -> tuple[list[str], bool]:
    found = _surviving(table_uri, commits, storage_options)
    return sorted(_absolute(table_uri, path) for path in found.files), found.mixed


@dataclass
class _Regrouped:
    """A compaction of the range whose removed files stay readable (until vacuum) and are read in its
    stead: the files it removed (``originals``, still named) and the files it wrote (``outputs``)."""

    originals: list[str]
    outputs: set[str]
    span: tuple[int, int]
    mixed: bool  # it also regrouped files from before the range


@dataclass
class _Surviving:
    """What ``_surviving`` finds: the files holding the range's rows (each with the first and last data
    version whose rows it holds), whether some also hold earlier rows, and the (added, removed) versions
    between which no slice may end (``slices``)."""

    files: dict[str, tuple[int, int]]
    mixed: bool
    held: list[tuple[int, int]]


def _surviving(table_uri: str, commits: list[_Commit], storage_options: dict[str, str] | None = None) -> _Surviving:
    """The files holding the rows ``commits`` added that are still there at the last of them.

    A file a data commit added is new. A later commit of the range that removes a new file put the rows
    it kept elsewhere: a delete (retention, ``erase``) in the files it wrote, a compaction in the files it
    regrouped them into. When every file it removed was new, its files replace them (they hold only new
    rows). When it also removed files from before the range, its files mix rows consumed before with new
    ones: the new files it removed stay named when they are still in storage (a compaction's, until
    vacuum), else its files are taken whole (``mixed``). Why: the delete's files used to be skipped while
    the new file it removed stayed named, so an ``erase`` between a drain and ``bodies`` (which purges
    at once) failed every later ``bodies`` and ``transform`` on a missing file.

    A compaction's removed files read in its stead stand for its files only until a later commit removes
    one of those (a retention delete the next day): then the compaction's files are named instead, and
    the later commit replaces the one it removed as above. Why: the removed files stayed named, and the
    rows the delete had removed were read again (bodies wrote typed rows of messages retention removed)."""
    new: dict[str, tuple[int, int]] = {}
    mixed = False
    held: list[tuple[int, int]] = []
    regrouped: dict[str, _Regrouped] = {}  # a compaction's written file -> its regrouping
    for commit in commits:
        for path in commit.removes:
            group = regrouped.get(path)
            if group is None:
                continue
            for original in group.originals:  # the compaction's files stand for its rows from now on
                new.pop(original, None)
            for output in group.outputs:
                regrouped.pop(output, None)
                new[output] = group.span
            mixed = mixed or group.mixed
        gone = [path for path in commit.removes if path in new]
        if not commit.delete and not commit.rearranged:
            # a data commit (an overwrite's removes are not ours)
            new.update(dict.fromkeys(commit.adds, (commit.version, commit.version)))
            continue
        if not gone:
            continue  # rows consumed before the range, rewritten or regrouped: not new
        span = (min(new[path][0] for path in gone), max(new[path][1] for path in gone))
        if not commit.delete and all(_exists(table_uri, path, storage_options) for path in gone):
            # a compaction's removed files stay readable until vacuum: read them, while its own stand
            group = _Regrouped(gone, set(commit.rearranged), span, len(gone) != len(commit.removes))
            regrouped.update(dict.fromkeys(commit.rearranged, group))
            continue
        written = commit.adds if commit.delete else commit.rearranged
        for path in gone:
            del new[path]
        new.update(dict.fromkeys(written, span))
        held.append((span[0], commit.version))
        if len(gone) == len(commit.removes):
            continue
        mixed = True
        log.info(
            "%s: version %d rewrote files of rows read before and new ones together; its %d file(s) are read "
            "whole (a table with batch ids reads only the range's batches: ``added_batches``)",
            table_uri,
            commit.version,
            len(written),
        )
    return _Surviving(new, mixed, held)


def _exists(table_uri: str, path: str, storage_options: dict[str, str] | None = None) -> bool:
    """Whether a data file the log names is still in storage (a removed one stays until vacuum)."""
    from pyarrow import fs as pafs

    fs, root = filesystem(table_uri, storage_options)
    return bool(fs.get_file_info(f"{root.rstrip('/')}/{unquote(path)}").type != pafs.FileType.NotFound)


def _held(table_uri: str, commits: list[_Commit], storage_options: dict[str, str] | None) -> list[tuple[int, int]]:
    """(added, removed) versions between which no range of ``slices`` may end: a file a data commit
    added, and the commit that removed it where its kept rows are read from that commit's files
    (``_surviving``: a delete's, or a compaction's once the file is gone or a later commit removed one
    of the compaction's files), followed through such files a later commit removes in turn (two erases)."""
    return _surviving(table_uri, commits, storage_options).held


def slices(
    table_uri: str, after: int | None, upto: int, max_rows: int, storage_options: dict[str, str] | None = None
) -> list[Span]:
    """Versions (after, upto] cut into consecutive ranges ``(a, b]`` of at most ``max_rows`` new rows each
    (a single commit larger than that is a range of its own), counted from the commits' ``add`` stats.

    Why: a stage that takes an increment in one Spark job holds it all (the first backlog of 5M journal
    rows ran the default local Spark out of memory); taken a range at a time, each committed as an
    increment of its own, memory is bounded by ``max_rows`` and a killed run resumes at the next range.
    A range never ends between a file's add and a later commit of (after, upto] that removed it where
    the rows it kept are read from that commit's files (``_new_files``: a delete's; a compaction's once
    vacuum deleted the file). One range, the
    whole span, where the log cannot be cut: a whole table (``after=None``) whose history holds more
    than appends (a compaction or a delete: older files may be gone), a commit the log no longer has, or
    an add without row counts.

    A whole table whose history holds a delete or a compaction is cut all the same when every data
    commit carries its batch ids (the drain's): each slice reads the files that hold its versions' rows
    now and keeps its batches' rows (``_rewritten_slices``). Why: a first ``bodies`` after an erase or a
    ``maintain`` took a 4.8M-row journal in one slice, its memory the backlog's (a review)."""
    if after is not None and after >= upto:
        return []
    whole = [Span(after, upto)]
    try:
        commits = _commits(table_uri, after, upto, storage_options)
    except LakeError:
        return whole
    rewritten = any(c.removes or c.delete for c in commits)
    if after is None and rewritten:
        return _rewritten_slices(table_uri, commits, after, upto, max_rows, storage_options)
    held = _held(table_uri, commits, storage_options)
    ranges: list[Span] = []
    start, rows, largest = after, 0, 0
    for commit in commits:
        if commit.delete:
            continue  # re-added rows are not new (see _new_files)
        if commit.rows is None:
            return whole
        cut = commit.version - 1
        if rows and rows + commit.rows > max_rows and not any(added <= cut < removed for added, removed in held):
            ranges.append(Span(start, cut))
            start, rows = cut, 0
        rows += commit.rows
        largest = max(largest, rows)
    ranges.append(Span(start, upto))
    if rewritten and largest > max_rows:
        # a later run's range that a compaction or a delete rewrote where it cannot be cut (the rewrite's
        # files mix rows read before with new ones: a run resumed after its first slices, or new rows
        # drained before a maintain and an erase): cut by batch id as a first run's (two reviews: 5M rows
        # in one slice, and a resumed first run's rest in one)
        return _rewritten_slices(table_uri, commits, after, upto, max_rows, storage_options, ranges)
    return ranges


def _rewritten_slices(
    table_uri: str,
    commits: list[_Commit],
    after: int | None,
    upto: int,
    max_rows: int,
    storage_options: dict[str, str] | None,
    fallback: list[Span] | None = None,
) -> list[Span]:
    """Versions (after, upto] (``commits``; ``after=None``: the whole table) whose history holds a delete
    or a compaction, cut into slices by its data commits' rows, each slice naming the files that hold its
    rows now (``_surviving``) and its batch ids: every version of each app after the one it had committed
    before the slice (at ``after``, for the first) up to its highest in the slice, so the rows a rewrite
    merged in from before the range are left out. One slice, said, when a data commit has no batch id or
    no row count, or a slice would name more than ``MAX_BATCHES`` (``fallback`` then, when given: a later
    run's cuts by version)."""
    name = table_uri.rstrip("/").rsplit("/", 1)[-1]
    data = [c for c in commits if not c.delete and not c.rearranged and c.adds]
    added = sum(c.rows or 0 for c in data)
    whole = fallback or [Span(after, upto)]
    if added <= max_rows:
        return whole
    why = None
    if any(c.rows is None for c in data):
        why = "a commit without row counts"
    elif any(not c.batches for c in data):
        why = "a commit without a batch id (not the drain's)"
    cuts: list[tuple[int | None, int, list[_Commit]]] = []
    start: int | None = after
    part: list[_Commit] = []
    rows = 0
    for commit in data if why is None else []:
        if rows and rows + (commit.rows or 0) > max_rows:
            cuts.append((start, commit.version - 1, part))
            start, part, rows = commit.version - 1, [], 0
        part.append(commit)
        rows += commit.rows or 0
    cuts.append((start, upto, part))
    if why is None and len(cuts) == 1:
        return whole  # one commit larger than a slice: the whole table, as any first run reads it
    spans: list[Span] = []
    if why is None:
        origins = _surviving(table_uri, commits, storage_options).files
        drained = {path: span for c in commits for path, span in c.drained.items()}
        try:
            highest = _committed_at(table_uri, after, data, storage_options)  # each app's version before the slice
        except Exception as exc:  # noqa: BLE001 - the log at ``after`` cleaned away: cut by version, as before
            why, highest = f"its log at version {after} cannot be read ({type(exc).__name__})", {}
        for low, high, part in cuts if why is None else []:
            batches = _batches_after(highest, part)
            if len(batches) > MAX_BATCHES:
                why = f"a slice of {len(batches)} batch ids"
                break
            floor = -1 if low is None else low
            within = _drained_within(part)
            files = [
                _absolute(table_uri, p)
                for p, (first, last) in sorted(origins.items())
                if first <= high and last > floor and _may_hold(drained.get(p), within)
            ]
            spans.append(Span(low, high, tuple(files), tuple(batches), within))
    if why is not None:  # said: the stage's memory follows the whole table this once (a review)
        log.warning(
            "%s: versions %s taken %s, not slices of %d row(s): their history holds a "
            "delete or a compaction (an erase, retention or maintain ran since this stage last read) and %s, "
            "so it cannot be cut; this run's memory follows them whole (up to %d rows added), later "
            "runs take slices again",
            name,
            _versions(after, upto),
            "in one slice" if len(whole) == 1 else f"in {len(whole)} slices cut by version alone",
            max_rows,
            why,
            added,
        )
        return whole
    log.info(
        "%s: versions %s in %d slices of the files a delete or a compaction rewrote, by batch id",
        name,
        _versions(after, upto),
        len(spans),
    )
    return spans


def _versions(after: int | None, upto: int) -> str:
    return f"up to {upto}" if after is None else f"({after}, {upto}]"


def _committed_at(
    table_uri: str, after: int | None, data: list[_Commit], storage_options: dict[str, str] | None
) -> dict[str, int]:
    """Each app of ``data``'s transactions with the version it had committed at ``after`` (none: the
    whole table, or an app new since)."""
    if after is None:
        return {}
    options = storage_options if storage_options is not None else options_for(table_uri)
    before = delta_table(table_uri, after, options)
    apps = {app for c in data for app, _ in c.batches}
    return {app: v for app in sorted(apps) if (v := before.transaction_version(app)) is not None}


def _drained_within(commits: list[_Commit]) -> tuple[dt.datetime, dt.datetime] | None:
    """The first and last ``drained_at`` of the rows ``commits`` (data commits) added, from their files'
    statistics; None when a file has none."""
    spans = [c.drained.get(path) for c in commits for path in c.adds]
    if not spans or any(s is None for s in spans):
        return None
    known = [s for s in spans if s is not None]
    return min(s[0] for s in known), max(s[1] for s in known)


def _may_hold(file: tuple[dt.datetime, dt.datetime] | None, rows: tuple[dt.datetime, dt.datetime] | None) -> bool:
    """Whether a file whose rows were drained within ``file`` may hold rows drained within ``rows``: a
    compaction keeps the rows' order, so each of its files holds a run of the versions it merged, and the
    files a slice's versions are not in are not read (its commit names them all alike). Unknown: may."""
    if file is None or rows is None:
        return True
    return file[0] <= rows[1] and rows[0] <= file[1]


def _batches_after(highest: dict[str, int], commits: list[_Commit]) -> list[str]:
    """The batch ids ``commits`` wrote: each app's versions after the one in ``highest`` (updated) up to
    its highest there. A commit records only each app's highest version (a group commit)."""
    top: dict[str, int] = {}
    for commit in commits:
        for app, version in commit.batches:
            top[app] = max(version, top.get(app, version))
    ids = [
        f"{app}:{version}"
        for app, last in sorted(top.items())
        for version in range(_next_version(highest.get(app)), last + 1)
    ]
    highest.update(top)
    return ids


def span_input(
    table_uri: str, span: Span, storage_options: dict[str, str] | None = None
) -> tuple[list[str], list[str] | None]:
    """The files a slice reads and the batch ids to keep of them (None: every row): a rewritten first
    run's (``Span.files``), else ``added_files`` and ``added_batches`` of its versions."""
    if span.files is not None:
        return list(span.files), list(span.batches or ())
    after, upto = span.after, span.upto
    return added_files(table_uri, after, upto, storage_options), added_batches(table_uri, after, upto, storage_options)


# the most batch ids a filter lists (``added_batches``); past it, the files are read whole, with a warning
MAX_BATCHES = 100_000


def added_batches(
    table_uri: str, after: int | None, upto: int, storage_options: dict[str, str] | None = None
) -> list[str] | None:
    """The batch ids (``appId:version``, what the drain writes in each journal row's ``batch_id``) that
    versions (after, upto] committed, when ``added_files`` names files that also hold rows of earlier
    commits (a delete that rewrote files read before together with new ones into one file); None when
    every row of those files is new, so no filter is needed.

    Why: such files are read whole, and a transform counted the earlier rows they kept twice. A commit
    records only each app's highest version (a group commit of batches 2 to 5 of one worker carries
    ``version: 5``), so the ids are every version of each app after the one it had committed at
    ``after`` up to its highest in the range: an app's versions only grow. A data commit without a
    transaction (not the drain's) cannot be told apart: None, and a warning that earlier rows are read
    again."""
    if after is None or after >= upto:
        return None
    commits = _commits(table_uri, after, upto, storage_options)
    if not _increment(table_uri, commits, storage_options)[1]:
        return None
    data = [c for c in commits if not c.delete and not c.rearranged and c.adds]
    highest: dict[str, int] = {}
    for commit in data:
        for app, version in commit.batches:
            highest[app] = max(version, highest.get(app, version))
    options = storage_options if storage_options is not None else options_for(table_uri)
    before = delta_table(table_uri, after, options)
    # the first version of each app the range committed: after the one it had at ``after``
    first = {app: _next_version(before.transaction_version(app)) for app in highest}
    count = sum(top + 1 - first[app] for app, top in highest.items())
    if any(not c.batches for c in data) or count > MAX_BATCHES:
        log.warning(
            "%s: versions (%s, %s] hold files that also keep rows read before, and %s: those earlier rows are "
            "read again",
            table_uri,
            after,
            upto,
            "a commit without a batch id" if count <= MAX_BATCHES else f"{count} batch ids to tell them apart",
        )
        return None
    return sorted(f"{app}:{version}" for app, top in highest.items() for version in range(first[app], top + 1))


def _next_version(committed: int | None) -> int:
    return 0 if committed is None else committed + 1


def added_files(
    table_uri: str, after: int | None, upto: int, storage_options: dict[str, str] | None = None
) -> list[str]:
    """Data files holding the rows versions (after, upto] added (``_new_files``), sorted; ``after=None``
    means the whole table. ``storage_options`` default: those of the lake the table is in."""
    if after is None:
        return snapshot_files(table_uri, upto, storage_options)
    if after >= upto:
        return []
    return _new_files(table_uri, _commits(table_uri, after, upto, storage_options), storage_options)


@dataclass(frozen=True)
class Rewrite:
    """Data commits of versions (after, upto] that removed files (an overwrite, a MERGE, an UPDATE, a
    REPLACE WHERE, CREATE OR REPLACE: not a delete, not a compaction), and what the range removed of the
    table at ``after``: the rows those files held may come back, unchanged, in the range's files."""

    commits: tuple[tuple[int, str], ...]  # (version, operation) of each such commit
    removed: tuple[str, ...]  # the data files of the table at ``after`` that are not in it at ``upto``
    gone: tuple[str, ...]  # of ``removed``, those no longer in storage (vacuumed)


def rewrite(
    table_uri: str, after: int | None, upto: int, storage_options: dict[str, str] | None = None
) -> Rewrite | None:
    """The data commits of (after, upto] that rewrote the table, and the files of ``after`` the range
    removed (``Rewrite``); None when no commit there is one (the usual appends: nothing more is read) or
    for a whole table (``after=None``). Why: a data commit's adds are all new to ``_surviving``, so an
    outbound table overwritten or MERGEd by another job had every row of its files published again."""
    if after is None or after >= upto:
        return None
    commits = _commits(table_uri, after, upto, storage_options)
    rewriting = [c for c in commits if c.removes and not c.delete and not c.rearranged]
    if not rewriting:
        return None
    written = {path for c in commits for path in (*c.adds, *c.rearranged)}
    removed = sorted({path for c in commits for path in c.removes} - written)
    gone = [path for path in removed if not _exists(table_uri, path, storage_options)]
    return Rewrite(
        tuple((c.version, c.operation or "an operation not named") for c in rewriting),
        tuple(_absolute(table_uri, path) for path in removed),
        tuple(_absolute(table_uri, path) for path in gone),
    )
