"""The rollout records: a Sample's problem, env, turn and agent are its group key's (one copy, so they cannot
disagree), it travels by pickle (Ray), and the old import path re-exports the records."""

import dataclasses
import pickle

import pytest

from rllib_integration.core.records import GroupKey, Sample


def _sample(key: GroupKey) -> Sample:
    return Sample(prompt="p", prompt_token_ids=[1], completion="c", completion_token_ids=[2], logprobs=[-0.5],
                  reward=1.0, group_key=key, policy_id="pol", valid=True, candidate=2)


def test_a_sample_reads_its_key_fields_from_its_group_key():
    s = _sample(GroupKey("task/3", 5, 1, "coder"))
    assert (s.task_id, s.env_idx, s.turn, s.agent) == ("task/3", 5, 1, "coder")
    s.group_key = s.group_key._replace(env_idx=105)  # a rollout worker's global env index
    assert s.env_idx == 105 and s.group_key == GroupKey("task/3", 105, 1, "coder")
    with pytest.raises(AttributeError):
        s.env_idx = 7
    with pytest.raises(TypeError, match="turn"):
        Sample(prompt="", prompt_token_ids=[], completion="", completion_token_ids=[], logprobs=[], reward=0.0,
               group_key=GroupKey("t", 0, 0, "a"), policy_id="p", valid=True, turn=0)
    assert "env_idx" not in {f.name for f in dataclasses.fields(Sample)}


def test_a_sample_pickles_whole_and_the_old_import_path_gives_the_same_records():
    s = _sample(GroupKey("t", 0, 2, "tester"))
    back = pickle.loads(pickle.dumps(s))
    assert back == s and (back.turn, back.agent) == (2, "tester")
    from rllib_integration.core import rollout

    assert rollout.Sample is Sample and rollout.GroupKey is GroupKey
