"""The drafter registry: one drafter per plugin config, one trie for every memory drafter of an
engine, arm statistics that outlive an evicted drafter, private drafters for cold starts."""

from paraspec.config import parse_plugin_params
from paraspec.decoding.drafters.registry import DrafterRegistry, build_drafter

EOS = [2]
MEMORY = parse_plugin_params({"plugin_type": "memory_decoding"})
HYBRID = parse_plugin_params({"plugin_type": "hybrid"})
LOOKAHEAD = parse_plugin_params({"plugin_type": "la", "level": 3})


def test_a_config_is_its_own_key():
    assert parse_plugin_params({"plugin_type": "memory_decoding"}) == MEMORY
    assert hash(parse_plugin_params('{"plugin_type": "memory_decoding"}')) == hash(MEMORY)
    assert parse_plugin_params({"plugin_type": "memory_decoding", "decoding_length": 8}) != MEMORY


def test_one_drafter_per_config_and_one_trie_for_all_memory_drafters():
    reg = DrafterRegistry(EOS)
    assert reg.drafter(None) is None
    md, hy, la = reg.drafter(MEMORY), reg.drafter(HYBRID), reg.drafter(LOOKAHEAD)
    assert reg.drafter(MEMORY) is md and {md.name, hy.name, la.name} == {
        "memory_decoding",
        "hybrid",
        "lookahead",
    }
    assert md.trie is hy.trie is reg.trie() and la.trie is None
    md.begin("a", [5, 6, 7, 8])
    md.observe("a", [9, 10])
    assert reg.trie().lookup([9, 10]) > 0  # what one wrote, the other drafts from


def test_arm_statistics_outlive_an_evicted_drafter():
    reg = DrafterRegistry(EOS, max_cached=1)
    first = reg.drafter(LOOKAHEAD)
    first.arms.record(0, 1.5)
    reg.drafter(MEMORY)  # evicts the lookahead drafter
    again = reg.drafter(LOOKAHEAD)
    assert again is not first and again.arms is first.arms and again.arms.epochs[0] == 1


def test_private_drafters_start_from_an_empty_memory():
    reg = DrafterRegistry(EOS)
    shared = reg.drafter(MEMORY)
    shared.begin("a", [1, 2, 3])
    shared.observe("a", [4, 5])
    cold = reg.private(MEMORY)
    assert cold.trie is not reg.trie() and len(cold.trie) == 0
    assert build_drafter(HYBRID, EOS).trie is not reg.trie()
