"""BuildShardsOptions' views: made once per class, sharing the options' values, and a copy's apart."""

from __future__ import annotations

import copy

from pipeline.build_shards_options import BuildShardsOptions  # before Beam (pipeline.runners.jobs; see CONTRIBUTING)

# isort: split

from apache_beam.options.pipeline_options import DebugOptions, PipelineOptions, StandardOptions, TypeOptions

from pipeline.progress import ProgressOptions


def test_a_view_is_made_once_per_class_and_shares_the_options_values():
    options = BuildShardsOptions(["--runner", "FnApiRunner", "--experiments", "a", "--dedup", "near"])
    standard = options.view_as(StandardOptions)
    assert options.view_as(StandardOptions) is standard  # not parsed again
    assert options.view_as(TypeOptions) is not standard
    standard.runner = "PrismRunner"
    options.view_as(DebugOptions).add_experiment("b")
    assert options.view_as(StandardOptions).runner == "PrismRunner"
    assert options.get_all_options()["runner"] == "PrismRunner"
    assert options.view_as(DebugOptions).experiments == ["a", "b"]
    assert options.view_as(BuildShardsOptions).dedup == "near"
    assert options.view_as(ProgressOptions).progress_seconds == ProgressOptions([]).progress_seconds
    # what Beam's own view of the same flags says, but for the value set through a view
    plain = PipelineOptions(["--runner", "FnApiRunner", "--experiments", "a", "--dedup", "near"])
    changed = {"runner": "PrismRunner", "experiments": ["a", "b"]}
    assert plain.view_as(TypeOptions).get_all_options() | changed == options.view_as(TypeOptions).get_all_options()


def test_a_copy_of_the_options_makes_its_own_views():
    options = BuildShardsOptions(["--runner", "FnApiRunner"])
    options.view_as(StandardOptions)
    copied = copy.deepcopy(options)  # as beam.Pipeline copies the options it is given
    copied.view_as(StandardOptions).runner = "PrismRunner"
    assert copied.view_as(StandardOptions).runner == "PrismRunner"
    assert options.view_as(StandardOptions).runner == "FnApiRunner"
