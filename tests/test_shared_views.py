"""SharedViewOptions: one view per options class, and every value the same as Beam's own views."""
from __future__ import annotations

import copy
import pickle

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DebugOptions,
    DirectOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    TypeOptions,
)
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.options import CorpusOptions
from beam_pipeline.options.shared_views import SharedViewOptions

FLAGS = [
    "--runner=DirectRunner",
    "--direct_running_mode=in_memory",
    "--direct_num_workers=3",
    "--experiments=a",
    "--experiments=b",
    "--no_pipeline_type_check",
    "--save_main_session",
    "--unknown_flag=kept",
]


def _every_options_class() -> list[type[PipelineOptions]]:
    found, todo = [], list(PipelineOptions.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls not in found:
            found.append(cls)
            todo.extend(cls.__subclasses__())
    return found


def test_every_view_reads_what_beams_own_view_reads():
    plain, shared = PipelineOptions(FLAGS), SharedViewOptions.of(PipelineOptions(FLAGS))
    classes = _every_options_class()
    assert len(classes) > 20 and CorpusOptions in classes
    for cls in classes:
        ours, beams = shared.view_as(cls), plain.view_as(cls)
        assert type(ours) is type(beams)
        names = ours._visible_option_list()
        assert names == beams._visible_option_list()
        assert {n: getattr(ours, n) for n in names} == {n: getattr(beams, n) for n in names}, cls
    assert shared.get_all_options(retain_unknown_options=True) == plain.get_all_options(retain_unknown_options=True)
    assert shared.view_as(DebugOptions).experiments == ["a", "b"]
    assert shared.view_as(TypeOptions).pipeline_type_check is False


def test_a_class_is_parsed_once_and_its_view_is_handed_out_again():
    shared = SharedViewOptions(FLAGS)
    first = shared.view_as(StandardOptions)
    assert shared.view_as(StandardOptions) is first
    assert shared.view_as(DirectOptions) is not first
    assert SharedViewOptions.of(shared) is shared


def test_a_value_set_through_any_view_is_seen_by_every_view_and_by_the_wrapped_options():
    wrapped = PipelineOptions(FLAGS)
    shared = SharedViewOptions.of(wrapped)
    shared.view_as(StandardOptions).runner = "FlinkRunner"
    assert shared.view_as(StandardOptions).runner == "FlinkRunner"
    assert wrapped.view_as(StandardOptions).runner == "FlinkRunner"
    wrapped.view_as(SetupOptions).save_main_session = False
    assert shared.view_as(SetupOptions).save_main_session is False
    assert shared.get_all_options()["runner"] == "FlinkRunner"


def test_a_copy_has_views_of_its_own_values():
    """beam.Pipeline deep-copies its options: a cached view must not write into the original."""
    shared = SharedViewOptions(FLAGS)
    shared.view_as(StandardOptions)
    for duplicate in (copy.deepcopy(shared), pickle.loads(pickle.dumps(shared))):
        assert type(duplicate) is SharedViewOptions
        duplicate.view_as(StandardOptions).runner = "FlinkRunner"
        assert duplicate.view_as(StandardOptions).runner == "FlinkRunner"
        assert shared.view_as(StandardOptions).runner == "DirectRunner"


def test_a_pipeline_runs_on_them_and_asks_beam_for_each_class_once():
    shared = SharedViewOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"])
    with beam.Pipeline(options=shared) as pipeline:
        squares = pipeline | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * x) | beam.combiners.ToList()
        assert_that(squares, equal_to([[1, 4, 9]]))
        options = pipeline.options
        assert type(options) is SharedViewOptions
    views = options.__dict__["_views"]
    assert TypeOptions in views and StandardOptions in views
    assert len(views) < 20  # one per class asked for, not one per applied transform and type check
