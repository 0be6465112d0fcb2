"""The bronze landing layer on the local runner (beam_pipeline/arrivals, docs/operations.md).

Pure parts first (when a file is complete, object names, the log's order and
cut-offs, the config), then landing jobs on the FnApiRunner behind the local
DirectRunner: ``land --once`` (batch) and ``land --stop_after`` (the
streaming job, bounded), with files written while the job runs, the same
bytes under two names, a ``kill -9`` mid-window and a restart, snapshots
``--until`` a cut-off, a build from a bronze snapshot against the build of
the same files as globs, and ``bronze gc``. The same scenarios against S3:
tests/test_arrivals_s3.py; on embedded Flink: tests/test_arrivals_flink.py.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import threading
import time

import pytest
import yaml

from arrivals_helpers import kill_group, landed_but_not_logged, landing_config, local_objects, pseudo_text, \
    segments, start_land, two_roots, wait_for, write_text
from beam_pipeline.cli import commands as cli
from beam_pipeline.config.landing import LandingConfig
from beam_pipeline.storage.bronze import extension_of, object_key, parse_stamp, segment_name, segment_pattern, \
    window_stamp
from beam_pipeline.storage.arrivals_log import ArrivalsLogError, identity, read_log, summarize, write_segment
from beam_pipeline.arrivals.stability import KNOWN, LAND, STALE, WAIT, Observation, PathState, observe, \
    stable_versions
from beam_pipeline.config.corpus import ConfigError, load_config, parse_config
from beam_pipeline.sources.snapshot import origins_of, snapshot_id_of
from conftest import IN_PROCESS, SAMPLE_CONFIG, dataset_id_from_output, read_layer_rows

# --- when a file is complete ---------------------------------------------------------


def fold(observations, **kw):
    state, decisions = PathState(), []
    for seen in observations:
        state, decision = observe(state, seen, **{"stable_polls": 2, "marker_mode": False, **kw})
        decisions.append(decision)
    return state, decisions


def test_a_file_lands_after_stable_polls_identical_polls_and_only_once():
    polls = [Observation(1.0, 10, 5.0), Observation(2.0, 10, 5.0), Observation(3.0, 10, 5.0)]
    assert fold(polls)[1] == [WAIT, LAND, KNOWN]
    assert fold(polls, stable_polls=3)[1] == [WAIT, WAIT, LAND]
    assert fold(polls, stable_polls=1)[1] == [LAND, KNOWN, KNOWN]


def test_a_growing_file_waits_and_each_change_restarts_the_count():
    growing = [Observation(1.0, 10, 5.0), Observation(2.0, 20, 6.0), Observation(3.0, 30, 7.0),
               Observation(4.0, 30, 7.0)]
    state, decisions = fold(growing)
    assert decisions == [WAIT, WAIT, WAIT, LAND]
    assert state.landed == (30, 7.0)
    same_mtime_other_size = [Observation(1.0, 10, 5.0), Observation(2.0, 11, 5.0), Observation(3.0, 11, 5.0)]
    assert fold(same_mtime_other_size)[1] == [WAIT, WAIT, LAND]


def test_listings_closer_than_the_spacing_are_one_poll_and_stale_ones_are_ignored():
    burst = [Observation(10.0, 10, 5.0), Observation(10.01, 10, 5.0), Observation(10.02, 10, 5.0)]
    assert fold(burst, min_spacing=0.5)[1] == [WAIT, WAIT, WAIT]  # a late impulse catching up: no time passed
    assert fold(burst + [Observation(10.6, 10, 5.0)], min_spacing=0.5)[1][-1] == LAND
    changed_in_burst = [Observation(10.0, 10, 5.0), Observation(10.01, 20, 6.0), Observation(10.6, 20, 6.0)]
    assert fold(changed_in_burst, min_spacing=0.5)[1] == [WAIT, WAIT, LAND]
    state, decisions = fold([Observation(2.0, 10, 5.0), Observation(1.0, 99, 9.0), Observation(3.0, 10, 5.0)])
    assert decisions == [WAIT, STALE, LAND]


def test_the_gate_state_round_trips_through_its_string_form():
    for state in (PathState(), PathState(2.5, (10, 5.25), 3, (10, 5.25)), PathState(1.0, (0, 0.0), 1, None)):
        assert PathState.from_json(state.to_json()) == state
    assert PathState.from_json(None) == PathState()


def test_marker_mode_lands_on_the_marker_and_known_versions_never_land_again():
    assert fold([Observation(1.0, 10, 5.0), Observation(2.0, 10, 5.0), Observation(3.0, 10, 5.0, marker=True)],
                marker_mode=True)[1] == [WAIT, WAIT, LAND]
    assert fold([Observation(1.0, 10, 5.0), Observation(2.0, 10, 5.0)], known={(10, 5.0)})[1] == [KNOWN, KNOWN]
    landed, decision, polls = stable_versions(
        [Observation(3.0, 30, 7.0), Observation(1.0, 10, 5.0), Observation(2.0, 30, 7.0)], stable_polls=2,
        marker_mode=False)
    assert (landed, decision, polls) == ([(30, 7.0)], LAND, 2)


# --- names -----------------------------------------------------------------------------

@pytest.mark.parametrize("path, extension", [
    ("s3://b/crawl/CC-MAIN-0001.warc.gz", ".warc.gz"), ("/d/part-0001.jsonl.zst", ".jsonl.zst"),
    ("data.parquet", ".parquet"), ("/d/README", ""), ("/d/notes.2024-06.txt", ".txt"),
    ("x/broken.warc.gz.bad", ".warc.gz.bad"), ("gs://b/a.b.c.JSONL", ".JSONL"), ("/d/.hidden", ".hidden")])
def test_an_object_keeps_the_extensions_a_reader_needs(path, extension):
    assert extension_of(path) == extension


def test_object_keys_and_segment_names():
    sha = hashlib.sha256(b"x").hexdigest()
    assert object_key("crawl", sha, ".warc.gz") == f"crawl/{sha[:2]}/{sha}.warc.gz"
    with pytest.raises(ValueError):
        object_key("crawl", "not-a-digest", ".txt")
    start = parse_stamp("2024-06-01T12:05:00Z")
    assert window_stamp(start) == "2024-06-01T12:05:00Z"
    assert parse_stamp("2024-06-01T14:05:00+02:00") == start
    name = segment_name(start, "a", "f" * 64)
    assert name == "20240601T120500Z-a-ffffffffffffffff.jsonl"
    import fnmatch
    assert fnmatch.fnmatch(name, segment_pattern(start, "a"))
    assert not fnmatch.fnmatch(segment_name(start, "a-b", "f" * 64), segment_pattern(start, "a"))


# --- the log -----------------------------------------------------------------------------

def entry(source, path, window_start, size=3, mtime=1.0, data=None):
    sha = hashlib.sha256((data or path).encode()).hexdigest()
    return {"source": source, "path": path, "size": size, "mtime": mtime, "sha256": sha,
            "object": object_key(source, sha, extension_of(path)), "window_start": window_stamp(window_start),
            "window_end": window_stamp(window_start + 60)}


def test_the_log_reads_in_one_order_each_arrival_once(tmp_path):
    root = str(tmp_path)
    w1, w2 = parse_stamp("2024-06-01T12:00:00Z"), parse_stamp("2024-06-01T12:01:00Z")
    first = [entry("b", "/l/z.txt", w1), entry("a", "/l/y.txt", w1), entry("a", "/l/x.txt", w1, data="same")]
    second = [entry("a", "/l/w.txt", w2, data="same"), entry("a", "/l/x.txt", w2, mtime=2.0, data="new")]
    path = write_segment(root, "a", w1, first)
    assert write_segment(root, "a", w1, list(reversed(first))) == path  # same entries: same name, not rewritten
    write_segment(root, "a", w2, second)
    write_segment(root, "a", w2, second[:1])  # a replayed commit holding an arrival again
    log = read_log(root)
    assert [(e["source"], e["path"], e["mtime"]) for e in log.entries] == [
        ("a", "/l/x.txt", 1.0), ("a", "/l/y.txt", 1.0), ("b", "/l/z.txt", 1.0), ("a", "/l/w.txt", 1.0),
        ("a", "/l/x.txt", 2.0)]
    assert (log.segments, log.repeated) == (3, 1)
    assert log.known_versions()[("a", "/l/x.txt")] == {(3, 1.0), (3, 2.0)}
    assert log.until(2) == 2 and log.until("2024-06-01T12:01:00Z") == 3 and log.until("2024-06-01T12:00:59Z") == 0
    with pytest.raises(ArrivalsLogError, match="holds 5"):
        log.until(6)
    with pytest.raises(ArrivalsLogError, match="future"):
        log.until("2999-01-01T00:00:00Z")
    summaries = summarize(log.entries)
    assert [(s.source, s.arrivals, s.new_objects, s.duplicates, s.changed_paths) for s in summaries] == [
        ("a", 2, 2, 0, []), ("b", 1, 1, 0, []), ("a", 2, 1, 1, ["/l/x.txt"])]


def test_a_position_inside_an_open_window_is_refused(tmp_path):
    now = time.time()
    write_segment(str(tmp_path), "a", now - 30, [entry("a", "/l/open.txt", now - 30)])
    with pytest.raises(ArrivalsLogError, match="still open"):
        read_log(str(tmp_path)).until(1)


# --- the config -----------------------------------------------------------------------------

def test_landing_is_not_part_of_any_digest_and_a_source_without_it_dumps_as_before():
    data = yaml.safe_load(open(SAMPLE_CONFIG))
    base = os.path.dirname(SAMPLE_CONFIG)
    plain = parse_config(data, base_dir=base)
    data["sources"][0]["landing"] = {"uri": "incoming/*.jsonl.zst", "poll_interval_seconds": 5, "stable_polls": 3}
    landed = parse_config(data, base_dir=base)
    assert "landing" not in plain.model_dump(mode="json")["sources"][0]
    assert landed.model_dump(mode="json") == plain.model_dump(mode="json")
    assert landed.digest() == plain.digest() == load_config(SAMPLE_CONFIG).digest()
    shown = landed.model_dump(mode="json", context={"landing": True})["sources"][0]["landing"]
    assert shown["uri"] == os.path.join(base, "incoming/*.jsonl.zst") and shown["stable_polls"] == 3


@pytest.mark.parametrize("landing, message", [
    ({"marker_suffix": ".done", "stable_polls": 3}, "marker_suffix or stable_polls"),
    ({"poll_interval_seconds": 0}, "greater than 0"),
    ({"stable_poll": 2}, "unknown field"),
    ({"marker_suffix": "*/done"}, "no '/' or '*'")])
def test_bad_landing_sections_are_config_errors(landing, message):
    data = yaml.safe_load(open(SAMPLE_CONFIG))
    data["sources"][0]["landing"] = landing
    with pytest.raises(ConfigError, match=message.replace("*", r"\*")):
        parse_config(data, base_dir=os.path.dirname(SAMPLE_CONFIG))
    assert LandingConfig().stable_polls == 2


# --- landing jobs on the local runner ---------------------------------------------------------

FAST = {"poll_interval_seconds": 0.3, "stable_polls": 3, "window_seconds": 1}


def land(config: str, *args: str) -> int:
    return cli.main(["land", "--config", config, *args])


def log_of(root: str) -> list[dict]:
    return list(read_log(root).entries)


def test_the_same_bytes_under_two_names_are_one_object_and_two_arrivals(tmp_path, capsys):
    write_text(tmp_path / "landing" / "a.txt", "the same text delivered twice\n")
    write_text(tmp_path / "landing" / "retry" / "a-copy.txt", "the same text delivered twice\n")
    write_text(tmp_path / "landing" / "b.txt", "another text\n")
    root = str(tmp_path / "out")
    config = landing_config(tmp_path / "c.yaml", root, {"docs": {"uri": str(tmp_path / "landing" / "**.txt"),
                                                                  "landing": FAST}})
    assert land(config, "--once") == 0
    out = capsys.readouterr().out
    objects = local_objects(root)
    assert len(objects) == 2
    entries = log_of(root)
    assert sorted(os.path.relpath(e["path"], tmp_path) for e in entries) == [
        "landing/a.txt", "landing/b.txt", "landing/retry/a-copy.txt"]
    twice = [e for e in entries if "a" in os.path.basename(e["path"])]
    assert len({e["object"] for e in twice}) == 1 and objects[twice[0]["object"]] == twice[0]["sha256"]
    assert "docs: 3 arrivals, 2 new objects" in out
    assert [(s.arrivals, s.new_objects, s.duplicates) for s in summarize(entries)] == [(3, 2, 1)]
    assert land(config, "--once") == 0  # a second run lands nothing: the log knows every version
    assert log_of(root) == entries and local_objects(root) == objects
    assert "landed      0 arrivals this run" in capsys.readouterr().out


def test_a_file_that_changes_after_it_landed_is_a_new_object_and_a_warning(tmp_path, capsys):
    path = tmp_path / "landing" / "report.txt"
    write_text(path, "first version\n", mtime=1_700_000_000)
    root = str(tmp_path / "out")
    config = landing_config(tmp_path / "c.yaml", root, {"docs": {"uri": str(tmp_path / "landing" / "*.txt"),
                                                                  "landing": FAST}})
    assert land(config, "--once") == 0
    first = local_objects(root)
    write_text(path, "second version, corrected\n", mtime=1_700_000_100)
    assert land(config, "--once") == 0
    out = capsys.readouterr().out
    assert f"{path} changed after it landed" in out
    objects = local_objects(root)
    assert set(first) < set(objects) and len(objects) == 2  # the old object stays, never replaced
    assert [e["mtime"] for e in log_of(root)] == [1_700_000_000, 1_700_000_100]
    assert summarize(log_of(root))[-1].changed_paths == [str(path)]


def test_with_a_marker_only_marked_files_land_and_markers_never(tmp_path):
    write_text(tmp_path / "landing" / "done.txt", "complete\n")
    write_text(tmp_path / "landing" / "done.txt.ok", "")
    write_text(tmp_path / "landing" / "pending.txt", "stable for a long time, but no marker\n", mtime=1_600_000_000)
    root = str(tmp_path / "out")
    config = landing_config(tmp_path / "c.yaml", root, {"docs": {
        "uri": str(tmp_path / "landing" / "*"), "landing": {"poll_interval_seconds": 0.3, "marker_suffix": ".ok"}}})
    assert land(config, "--once") == 0
    assert [os.path.basename(e["path"]) for e in log_of(root)] == ["done.txt"]
    write_text(tmp_path / "landing" / "pending.txt.ok", "")
    assert land(config, "--once") == 0
    assert [os.path.basename(e["path"]) for e in log_of(root)] == ["done.txt", "pending.txt"]


def write_slowly(paths: list, pieces: int, pause: float) -> threading.Thread:
    """Append ``pieces`` lines to each of ``paths``, ``pause`` seconds apart (a writer that is not done)."""
    def run():
        for i in range(pieces):
            for path in paths:
                with open(path, "a") as f:
                    f.write(f"piece {i} of {os.path.basename(path)}: " + "words " * 20 + "\n")
            time.sleep(pause)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_files_written_slowly_while_the_job_runs_land_once_whole(tmp_path, capsys):
    landing = tmp_path / "landing"
    landing.mkdir()
    root = str(tmp_path / "out")
    config = landing_config(tmp_path / "c.yaml", root, {"docs": {"uri": str(landing / "*.txt"), "landing": FAST}})
    paths = [landing / f"slow-{i}.txt" for i in range(3)]
    for path in paths:
        path.write_text("")
    writer = write_slowly(paths, pieces=30, pause=0.1)  # 3 s of appends, never 0.3 s without a change
    try:
        assert land(config, "--stop_after", "9") == 0
    finally:
        writer.join()
    out = capsys.readouterr().out
    assert "waiting to become stable" in out and "(slow-" in out  # the progress lines saw them being written
    entries = log_of(root)
    final = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
    assert sorted((e["path"], e["sha256"]) for e in entries) == sorted(final.items())  # once each, whole
    assert sorted(local_objects(root).values()) == sorted(final.values())  # no partial copy was ever committed
    assert not glob.glob(os.path.join(root, "bronze", "_tmp", "*"))


def test_once_leaves_a_file_that_is_still_being_written(tmp_path, capsys):
    landing = tmp_path / "landing"
    landing.mkdir()
    write_text(landing / "done.txt", "complete\n", mtime=1_600_000_000)
    (landing / "growing.txt").write_text("")
    root = str(tmp_path / "out")
    config = landing_config(tmp_path / "c.yaml", root, {"docs": {"uri": str(landing / "*.txt"), "landing": FAST}})
    writer = write_slowly([landing / "growing.txt"], pieces=40, pause=0.05)
    try:
        assert land(config, "--once") == 0
    finally:
        writer.join()
    out = capsys.readouterr().out
    assert [os.path.basename(e["path"]) for e in log_of(root)] == ["done.txt"]
    assert "docs: 1 files not landed yet" in out and "growing.txt" in out
    assert land(config, "--once") == 0
    assert [os.path.basename(e["path"]) for e in log_of(root)] == ["done.txt", "growing.txt"]


def bronze_state(root: str) -> tuple[dict, list]:
    return local_objects(root), sorted(identity(e) for e in log_of(root))


@pytest.mark.slow
def test_kill_9_mid_window_and_restart_give_the_objects_and_log_of_an_uninterrupted_run(tmp_path):
    landing, killed_root, killed, reference_root, reference = two_roots(tmp_path, {**FAST, "window_seconds": 2})
    process = start_land(["--config", killed, "--stop_after", "120"], str(tmp_path / "killed-1.log"))
    try:
        wait_for(lambda: len(log_of(killed_root)) == 3, 90, what="the early files' window to commit")
        before_kill = segments(killed_root)
        for i in range(16):  # 64 MB more: copies the job is in the middle of when it is killed
            (landing / f"late-{i:02d}.txt").write_bytes(pseudo_text(f"late {i}", 4 << 20))
        orphans = wait_for(lambda: landed_but_not_logged(killed_root), 90, interval=0.01,
                           what="a copy whose window is not committed")
    finally:
        kill_group(process)
    logged_at_kill = {identity(e) for e in log_of(killed_root)}
    assert orphans and len(logged_at_kill) < 19  # killed mid-window: copied, not committed
    killed_at = time.time()

    restart = start_land(["--config", killed, "--stop_after", "10"], str(tmp_path / "killed-2.log"))
    assert restart.wait(timeout=300) == 0, open(tmp_path / "killed-2.log").read()[-3000:]
    uninterrupted = start_land(["--config", reference, "--stop_after", "10"], str(tmp_path / "reference.log"))
    assert uninterrupted.wait(timeout=300) == 0, open(tmp_path / "reference.log").read()[-3000:]

    objects, arrivals = bronze_state(killed_root)
    assert (objects, arrivals) == bronze_state(reference_root)
    assert len(arrivals) == 19 and len(set(arrivals)) == 19 and len(objects) == 19
    assert read_log(killed_root).repeated == 0
    for path, data in before_kill.items():  # append-only: what was committed before the kill is untouched
        assert open(path, "rb").read() == data
    for e in log_of(killed_root):  # the restart committed the rest, in its own windows
        if identity(e) not in logged_at_kill:
            assert parse_stamp(e["window_end"]) > killed_at
    assert not glob.glob(os.path.join(killed_root, "bronze", "_tmp", "*"))


def test_a_file_that_changes_or_goes_away_while_it_is_copied_does_not_land(tmp_path):
    from beam_pipeline.arrivals.transforms import land_file, landing_request

    path = tmp_path / "landing" / "moving.txt"
    write_text(path, "the bytes the gate saw\n", mtime=1_600_000_000)
    root = str(tmp_path / "out")
    request = landing_request("docs", str(path), (path.stat().st_size, path.stat().st_mtime), [])
    write_text(path, "the bytes the gate saw, and more\n", mtime=1_600_000_001)
    assert land_file(root, request) is None
    path.unlink()
    assert land_file(root, request) is None
    assert local_objects(root) == {} and not glob.glob(os.path.join(root, "bronze", "_tmp", "*"))
    write_text(path, "stable\n", mtime=1_600_000_002)
    arrival = land_file(root, landing_request("docs", str(path), (path.stat().st_size, path.stat().st_mtime), []))
    assert arrival["created"] and local_objects(root) == {arrival["object"]: arrival["sha256"]}


# --- snapshots, builds and gc -------------------------------------------------------------------

def snapshot(config: str, *args: str) -> None:
    assert cli.main(["snapshot", "--config", config, "--from-bronze", *args]) == 0


def snapshot_id(capsys) -> str:
    out = capsys.readouterr().out
    return next(line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("snapshot "))


def land_in_windows(tmp_path, batches: list[list[str]], window: int = 1) -> tuple[str, str, list[float]]:
    """Land each batch of files with ``land --once`` in its own window; (config, root, window ends)."""
    landing = tmp_path / "landing"
    root = str(tmp_path / "out")
    config = landing_config(tmp_path / "c.yaml", root, {"docs": {
        "uri": str(landing / "*.txt"), "landing": {**FAST, "window_seconds": window}}})
    ends = []
    for number, batch in enumerate(batches):
        for name in batch:
            write_text(landing / name, f"{name}: text of batch {number}\n", mtime=1_600_000_000)
        assert land(config, "--once") == 0
        ends.append(parse_stamp(log_of(root)[-1]["window_end"]))
        time.sleep(max(0.0, ends[-1] - time.time()) + 0.05)  # the window closes before the next batch
    return config, root, ends


def test_snapshot_until_takes_exactly_the_arrivals_up_to_the_cut_off(tmp_path, capsys):
    config, root, ends = land_in_windows(tmp_path, [["a.txt", "b.txt"], ["c.txt", "d.txt", "e.txt"], ["f.txt"]])
    capsys.readouterr()
    entries = log_of(root)
    assert len(entries) == 6

    def snap(*args):
        snapshot(config, *args)
        sid = snapshot_id(capsys)
        return sid, json.load(open(os.path.join(root, "snapshots", f"{sid}.json")))

    by_position, manifest = snap("--until", "2")
    by_time, _ = snap("--until", window_stamp(ends[0]))
    assert by_time == by_position  # the same cut-off, the same manifest, the same id
    origins = sorted(o for f in manifest["sources"]["docs"]["files"] for o in f["origins"])
    assert [os.path.basename(o) for o in origins] == ["a.txt", "b.txt"]
    assert manifest["bronze"] == {"since": 0, "until": 2, "until_window_end": window_stamp(ends[0])}
    _, second = snap("--until", window_stamp(ends[1]))
    assert sorted(os.path.basename(o) for f in second["sources"]["docs"]["files"] for o in f["origins"]) == \
        ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt"]
    _, sliding = snap("--since", "2", "--until", "6")
    assert sorted(os.path.basename(o) for f in sliding["sources"]["docs"]["files"] for o in f["origins"]) == \
        ["c.txt", "d.txt", "e.txt", "f.txt"]
    for f in second["sources"]["docs"]["files"]:  # each file entry is a bronze object with its sha256
        assert f["path"].startswith(os.path.join(root, "bronze", "docs"))
        assert f["checksum"] == "sha256:" + hashlib.sha256(open(f["path"], "rb").read()).hexdigest()
    assert cli.main(["snapshot", "--config", config, "--from-bronze", "--until", "7"]) == 1
    assert "holds 6 arrivals" in capsys.readouterr().err

    # the run report's section: what the sliding snapshot froze, per source and per window
    from beam_pipeline.arrivals.report import gather_arrivals
    from beam_pipeline.report.html import arrivals_section
    sliding_id = snapshot_id_of(sliding)
    info = gather_arrivals(root, sliding_id)
    assert (info["since"], info["until"]) == (2, 6)
    sliding_bytes = sum(f["size"] for f in sliding["sources"]["docs"]["files"])
    assert info["sources"] == {"docs": {"objects": 4, "bytes": sliding_bytes, "arrived_as": 4}}
    assert [(w.arrivals, w.new_objects) for w in info["windows"]] == [(3, 3), (1, 1)]
    html = arrivals_section(root, sliding_id)
    assert 'id="arrivals"' in html and "arrivals 3–6 of the bronze arrivals log" in html
    assert gather_arrivals(root, "0" * 24) is None and arrivals_section(root, "0" * 24) == ""


def test_gc_dry_run_changes_nothing_and_apply_removes_only_unreferenced_objects(tmp_path, capsys):
    config, root, _ = land_in_windows(tmp_path, [["a.txt", "b.txt"], ["c.txt", "d.txt"]])
    capsys.readouterr()
    snapshot(config, "--until", "2")
    first = snapshot_id(capsys)
    snapshot(config, "--since", "2", "--until", "4")
    second = snapshot_id(capsys)
    config, root, _ = land_in_windows(tmp_path, [["e.txt"]])  # after the latest cut-off: pending
    orphan = os.path.join(root, "bronze", "docs", "ff", "f" * 64 + ".txt")  # copied by a killed job, never logged
    write_text(orphan, "orphan\n", mtime=time.time() - 7200)
    young = os.path.join(root, "bronze", "docs", "ee", "e" * 64 + ".txt")
    write_text(young, "young orphan\n")
    by_name = {os.path.basename(e["path"]): os.path.join(root, "bronze", e["object"]) for e in log_of(root)}

    def tree():
        return {p: open(p, "rb").read() for p in glob.glob(os.path.join(root, "**"), recursive=True)
                if os.path.isfile(p)}

    before = tree()
    capsys.readouterr()
    assert cli.main(["bronze", "gc", "--config", config, "--keep", second, "--min_age_seconds", "3600"]) == 0
    out = capsys.readouterr().out
    assert tree() == before  # a dry run changes nothing
    garbage = {by_name["a.txt"], by_name["b.txt"], orphan}
    assert f"to delete          3 objects" in out and all(p in out for p in garbage)
    assert cli.main(["bronze", "gc", "--config", config, "--keep", second, "--min_age_seconds", "3600",
                     "--apply"]) == 0
    after = tree()
    assert set(before) - set(after) == garbage
    for name in ("c.txt", "d.txt", "e.txt"):
        assert os.path.exists(by_name[name])
    assert os.path.exists(young)
    # a kept count keeps the latest cut-offs; the first snapshot's objects are gone: it cannot be taken again
    assert cli.main(["bronze", "gc", "--config", config, "--keep", "1", "--min_age_seconds", "3600"]) == 0
    assert "to delete          0 objects" in capsys.readouterr().out
    assert cli.main(["snapshot", "--config", config, "--from-bronze", "--until", "2"]) == 1
    assert "missing" in capsys.readouterr().err
    assert cli.main(["bronze", "gc", "--config", config, "--keep", first + "," + "0" * 24]) == 1


# --- a build from a bronze snapshot ---------------------------------------------------------------

def sample_landing_config(tmp_path, root: str) -> tuple[str, str]:
    """The sample corpus, its files copied into landing prefixes (and one file delivered twice)."""
    data = yaml.safe_load(open(SAMPLE_CONFIG))
    base = os.path.dirname(SAMPLE_CONFIG)
    landing = tmp_path / "landing"
    for source in data["sources"]:
        pattern = source["uri"]
        folder = landing / source["name"]
        folder.mkdir(parents=True)
        for path in sorted(glob.glob(os.path.join(base, pattern))):
            shutil.copy(path, folder / os.path.basename(path))
        source["uri"] = str(folder / os.path.basename(pattern))
        source["landing"] = {"poll_interval_seconds": 0.2, "stable_polls": 2, "window_seconds": 1}
    first = sorted(glob.glob(str(landing / "python-docs" / "*.jsonl.zst")))[0]
    shutil.copy(first, landing / "python-docs" / ("redelivered-" + os.path.basename(first)))
    for key, value in list(data.items()):  # the sample's other paths, resolved against the sample folder
        data[key] = _absolute(value, base)
    data["output_root"] = root
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path), str(landing)


def _absolute(value, base: str):
    if isinstance(value, dict):
        return {k: _absolute(v, base) for k, v in value.items()}
    if isinstance(value, list):
        return [_absolute(v, base) for v in value]
    if isinstance(value, str) and not os.path.isabs(value) and os.path.exists(os.path.join(base, value)):
        return os.path.join(base, value)
    return value


@pytest.mark.slow
def test_a_build_from_a_bronze_snapshot_has_the_dataset_id_of_the_build_over_globs(built, tmp_path, capsys):
    root = str(tmp_path / "out")
    config, landing = sample_landing_config(tmp_path, root)
    assert land(config, "--once") == 0
    entries = log_of(root)
    time.sleep(max(0.0, parse_stamp(entries[-1]["window_end"]) - time.time()) + 0.05)  # its window closes
    files = [p for p in glob.glob(os.path.join(landing, "*", "*"))]
    assert len(entries) == len(files)
    assert len(local_objects(root)) < len(files)  # the sample repeats some files byte for byte, and one redelivery
    capsys.readouterr()
    assert cli.main(["snapshot", "--config", config, "--from-bronze", "--until", str(len(entries))]) == 0
    sid = snapshot_id(capsys)
    assert cli.main(["run", "--config", config, "--snapshot_id", sid, *IN_PROCESS]) == 0
    from_bronze = dataset_id_from_output(capsys.readouterr().out)
    # the reference build read the same bytes through the sample config's globs (the redelivered file is
    # a byte-for-byte copy: a glob build would collapse it as a verbatim repeat)
    assert from_bronze == built["manifest"]["dataset_id"]

    # the same documents: content-derived ids do not depend on where the bytes were read
    def doc_ids(output_root):
        (layer,) = glob.glob(os.path.join(output_root, "layers", "ingest", "*", "documents"))
        return sorted(r["doc_id"] for r in read_layer_rows(layer))
    assert doc_ids(root) == doc_ids(built["root"])
    # provenance: documents name the bronze object they were read from; the snapshot names where it came from
    manifest = json.load(open(os.path.join(root, "snapshots", f"{sid}.json")))
    origins = origins_of(manifest)
    (layer,) = glob.glob(os.path.join(root, "layers", "ingest", "*", "documents"))
    read_from = {r["file"] for r in read_layer_rows(layer)}
    assert read_from <= set(origins) and all(p.startswith(os.path.join(root, "bronze")) for p in read_from)
    assert {o for paths in origins.values() for o in paths} == set(files)
    # the run report shows the snapshot's arrivals, counted from the manifest
    (report,) = glob.glob(os.path.join(root, "runs", "*", "report.html"))
    page = open(report).read()
    assert 'href="#arrivals"' in page and f"arrivals 1–{len(entries)} of the bronze arrivals log" in page
    for name, source in manifest["sources"].items():
        files = source["files"]
        assert (f'<tr><td>{name}</td><td class="n">{len(files):,}</td><td class="n">'
                f'{sum(f["size"] for f in files):,}</td><td class="n">'
                f'{sum(len(f["origins"]) for f in files):,}</td></tr>') in page


# --- Dataflow: the streaming landing job translates, offline -------------------------------------

def test_the_landing_job_translates_to_a_dataflow_streaming_job(tmp_path):
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    from beam_pipeline.arrivals.landing import build_landing_pipeline
    from test_dataflow_dry_run import DATAFLOW_DRY_RUN, dataflow_job

    config = load_config(landing_config(tmp_path / "c.yaml", "gs://dummy/corpus", {
        "crawl": {"uri": "gs://dummy/incoming/crawl/*.warc.gz", "format": "warc", "landing": FAST},
        "dumps": {"uri": "gs://dummy/incoming/dumps/*.jsonl.zst", "format": "jsonl",
                  "landing": {"marker_suffix": ".done", "window_seconds": 600}}}))
    for once in (False, True):
        pipeline = build_landing_pipeline(config, PipelineOptions(DATAFLOW_DRY_RUN), once=once, stop_after=None)
        job, proto = dataflow_job(pipeline)
        assert job["type"] == ("JOB_TYPE_BATCH" if once else "JOB_TYPE_STREAMING")
        labels = [t.unique_name for t in proto.components.transforms.values()]
        for source in ("crawl", "dumps"):
            step = "LandNow" if once else "Land"
            assert any(label.startswith(f"{step}[{source}]/CommitArrivals/BatchPerWindow") for label in labels)
        if not once:
            assert any("MatchContinuously" in label for label in labels)
        coders = proto.components.coders

        def urns(coder_id):  # a coder and every coder it is made of
            return [coders[coder_id].spec.urn] + [u for c in coders[coder_id].component_coder_ids for u in urns(c)]
        stateful = 0
        for transform in proto.components.transforms.values():
            if transform.spec.urn == common_urns.primitives.PAR_DO.urn:
                payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
                if payload.state_specs:  # state is keyed by the encoded key: it must encode deterministically
                    stateful += 1
                    (main,) = [p for tag, p in transform.inputs.items() if tag not in payload.side_inputs]
                    key = coders[proto.components.pcollections[main].coder_id].component_coder_ids[0]
                    assert set(urns(key)) <= {common_urns.coders.KV.urn, common_urns.coders.STRING_UTF8.urn}, \
                        (transform.unique_name, urns(key))
        assert stateful == (2 if once else 4)  # per source: the gate (streaming) and the commit batching


def test_trace_of_a_bronze_build_rereads_the_record_from_its_object(tmp_path, capsys):
    words = "It has several words in it so that the heuristics keep it in the dataset."
    for name in ("one.txt", "two.txt"):
        write_text(tmp_path / "landing" / name, f"{name}: {words}\n", mtime=1_600_000_000)
    root = str(tmp_path / "out")
    config = landing_config(tmp_path / "c.yaml", root, {"docs": {
        "uri": str(tmp_path / "landing" / "*.txt"), "landing": {**FAST, "window_seconds": 1}}})
    assert land(config, "--once") == 0
    time.sleep(max(0.0, parse_stamp(log_of(root)[-1]["window_end"]) - time.time()) + 0.05)
    capsys.readouterr()
    snapshot(config, "--until", "2")
    sid = snapshot_id(capsys)
    assert cli.main(["run", "--config", config, "--snapshot_id", sid, *IN_PROCESS]) == 0
    dataset = next(line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("dataset "))
    (shard,) = {os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(dataset, "shards", "*"))}
    assert cli.main(["trace", "--dataset", dataset, "--shard", shard, "--offset", "0"]) == 0
    out = capsys.readouterr().out
    (read_from,) = [line.split()[1] for line in out.splitlines() if line.strip().startswith("file ")]
    assert read_from.startswith(os.path.join(root, "bronze", "docs")) and "normalized text matches doc_id" in out
    manifest = json.load(open(os.path.join(root, "snapshots", f"{sid}.json")))
    (origin,) = origins_of(manifest)[read_from]
    assert open(origin, "rb").read() == open(read_from, "rb").read()
