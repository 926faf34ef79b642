def test_a_start_up_error_is_said_by_the_nodes_first_rank_at_once_and_by_another_if_it_outlives_the_grace(
    monkeypatch, capsys
):
    """Under a launcher the first rank to exit non-zero makes it end the others: a silent rank exiting first took the
    only message with it. Now the other ranks wait (the launcher ends them) and say it themselves if still running."""
    from trainer.engine import distributed

    waited = []
    monkeypatch.setattr(distributed.time, "sleep", waited.append)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    distributed.say_setup_error("pretrain", "--eval-shards 9: too many")
    assert waited == [] and capsys.readouterr().err == "pretrain: error: --eval-shards 9: too many\n"
    monkeypatch.setenv("LOCAL_RANK", "1")
    distributed.say_setup_error("pretrain", "--eval-shards 9: too many")
    assert waited == [distributed.SETUP_ERROR_GRACE_S] and capsys.readouterr().err.startswith("pretrain: error: ")
