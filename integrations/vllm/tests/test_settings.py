import pytest

from memkv_vllm.settings import DEFAULT_RETRY_AFTER_S, DEFAULT_TIMEOUT_MS, parse


def test_extra_config_passes_client_settings():
    s = parse({"servers": "a:1, b:2", "auth_key": "00" * 32, "transport": "tcp", "timeout_ms": 250,
               "namespace": "t", "model_id": "llama"}, {})
    assert s.client_kwargs == {"servers": ["a:1", "b:2"], "auth_key": "00" * 32,
                               "transport": "tcp", "timeout_ms": 250}
    assert (s.namespace, s.model_id) == ("t", "llama")


def test_environment_is_left_to_the_memkv_client():
    # Nothing given: memkv reads MEMKV_SERVERS etc. itself; only the timeout gets a default,
    # and only when MEMKV_TIMEOUT_MS does not set one.
    assert parse({}, {}).client_kwargs == {"timeout_ms": DEFAULT_TIMEOUT_MS}
    assert parse(None, {"MEMKV_TIMEOUT_MS": "90"}).client_kwargs == {}


@pytest.mark.parametrize("extra, words", [
    ({"server": ["a:1"]}, "unknown kv_connector_extra_config key(s) ['server']"),
    ({"servers": []}, "'servers' must be a non-empty list"),
    ({"servers": [1]}, "'servers' must be a non-empty list"),
    ({"timeout_ms": 0}, "'timeout_ms' must be a positive integer"),
    ({"timeout_ms": "soon"}, "'timeout_ms' must be a positive integer"),
    ({"retry_after_s": -1}, "'retry_after_s' must be >= 0"),
    ({"retry_after_s": "soon"}, "'retry_after_s' must be >= 0"),
    ({"retry_after_s": "nan"}, "'retry_after_s' must be >= 0"),
    ({"recompute_on_load_failure": "maybe"}, "'recompute_on_load_failure' must be true or false"),
    ({"recompute_on_load_failure": 2}, "'recompute_on_load_failure' must be true or false"),
    ({"load_async": "later"}, "'load_async' must be true or false"),
    ({"save_async": 3}, "'save_async' must be true or false"),
    ({"lookup_wait_ms": -1}, "'lookup_wait_ms' must be from 0 to 1000"),
    ({"lookup_wait_ms": "inf"}, "'lookup_wait_ms' must be from 0 to 1000"),
    ({"lookup_wait_ms": 5000}, "'lookup_wait_ms' must be from 0 to 1000"),
    ({"lookup_timeout_s": 0}, "'lookup_timeout_s' must be more than 0 and at most 60"),
    ({"lookup_timeout_s": "nan"}, "'lookup_timeout_s' must be more than 0 and at most 60"),
    ({"lookup_timeout_s": 120}, "'lookup_timeout_s' must be more than 0 and at most 60"),
])
def test_bad_settings_are_named(extra, words):
    with pytest.raises(ValueError) as e:
        parse(extra, {})
    assert words in str(e.value)


@pytest.mark.parametrize("value, expected", [
    (False, False), (0, False), ("false", False), ("no", False), ("0", False), (" FALSE ", False),
    (True, True), (1, True), ("true", True), ("yes", True), ("1", True),
])
def test_recompute_on_load_failure_reads_text_by_its_words(value, expected):
    # Templated JSON hands flags over as text, where bool("false") would be True.
    assert parse({"recompute_on_load_failure": value}, {}).recompute_on_load_failure is expected


def test_retry_after_s_accepts_numbers_as_text():
    assert parse({"retry_after_s": "2.5"}, {}).retry_after_s == 2.5
    assert parse({}, {}).retry_after_s == DEFAULT_RETRY_AFTER_S


def test_loads_are_asynchronous_and_lookups_wait_briefly_by_default():
    s = parse({}, {})
    assert s.load_async is True and s.save_async is True and s.lookup_wait_ms == 5.0
    s = parse({"load_async": "false", "lookup_wait_ms": "0"}, {})
    assert s.load_async is False and s.lookup_wait_ms == 0.0
    assert s.lookup_timeout_s == 1.0
    assert parse({"lookup_timeout_s": "0.25"}, {}).lookup_timeout_s == 0.25
