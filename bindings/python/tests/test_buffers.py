"""Which objects memkv takes as values and destinations: any C-contiguous buffer of plain
items, used in place. Objects that are not buffers are a wrong type (TypeError); buffers that
cannot be used are refused by name (BufferError), before anything is read or written."""

import ctypes
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

import memkv
from memkv.testing import MemkvServer

OBJECT_ARRAY = textwrap.dedent(
    """
    import resource, select, sys
    import numpy as np
    import memkv

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash here needs no core dump
    addr, key, how = sys.argv[1], sys.argv[2], sys.argv[3]
    c = memkv.Client(servers=[addr], auth_key=key, transport="tcp", timeout_ms=5000)
    c.put("obj", b"\\x41" * 16)  # two object pointers' worth of 0x41 bytes
    arr = np.array([object(), object()], dtype=object)
    if how == "get_into an object field beside a datetime64":
        # A dtype the buffer protocol cannot describe: exported without its item format.
        arr = np.zeros(1, dtype=[("o", "O"), ("t", "M8[s]")])
        arr["o"][0] = object()
    try:
        if how.startswith("get_into") and "memoryview" not in how:
            c.get_into("obj", arr)
        elif how == "get_into a memoryview":
            c.get_into("obj", memoryview(arr))
        elif how == "get_many_into":
            c.get_many_into(["obj"], [arr])
        else:
            conn = memkv.MemkvConnector(servers=[addr], auth_key=key, transport="tcp")
            conn.submit_batch_get(["obj"], [arr])
            select.select([conn.event_fd()], [], [], 10)
            conn.close()
    except BufferError as e:
        print("refused:", e)
    else:
        print("written over the array's object pointers", flush=True)
    print(arr)  # follows the pointers: a crash if they were overwritten
    """
)


@pytest.mark.parametrize(
    "how",
    [
        "get_into",
        "get_into a memoryview",
        "get_into an object field beside a datetime64",
        "get_many_into",
        "connector",
    ],
)
def test_an_array_of_python_objects_is_not_a_destination(server: MemkvServer, how: str) -> None:
    """The bytes of a dtype=object array are object pointers: a value written over them
    would crash the interpreter (run in a child process, so that a crash fails the test)."""
    p = subprocess.run(
        [sys.executable, "-c", OBJECT_ARRAY, server.address, server.auth_key, how],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0 and "refused:" in p.stdout, (
        f"rc={p.returncode} stdout={p.stdout!r} stderr={p.stderr[-2000:]!r}"
    )
    assert "Python objects" in p.stdout and "buffer" in p.stdout, p.stdout


def test_buffers_of_python_objects_are_refused_by_name(client: memkv.Client) -> None:
    """Storing object pointers would store heap addresses; reading into them, corrupt the
    interpreter. numpy object arrays, structured arrays with an object field and ctypes
    py_object arrays all say their items are objects."""
    objects: list[Any] = [
        np.array([1, "a"], dtype=object),
        np.zeros(2, dtype=[("a", "O"), ("b", "<i4")]),
        (ctypes.py_object * 2)(),
    ]
    # A memoryview refuses a plain-bytes export that also asks for the item format (it
    # cannot be both): its items are seen only through a contiguous export with the format.
    objects += [memoryview(obj) for obj in objects]
    # numpy cannot describe a datetime64 (or a bfloat16) item to the buffer protocol: such an
    # array is taken without its format, and numpy's dtype says whether it holds objects.
    objects.append(np.zeros(2, dtype=[("a", "O"), ("t", "M8[s]")]))
    client.put("objects/k", bytes(64))
    for obj in objects:
        with pytest.raises(BufferError, match="value: .*Python objects"):
            client.put("objects/k", obj)
        with pytest.raises(BufferError, match="buffer: .*Python objects"):
            client.get_into("objects/k", obj)
        with pytest.raises(BufferError, match=r"items\[1\] value: .*Python objects"):
            client.put_many([("objects/a", b"1"), ("objects/b", obj)])
        with pytest.raises(BufferError, match=r"buffers\[0\]: .*Python objects"):
            client.get_many_into(["objects/k"], [obj])
    assert client.get("objects/k") == bytes(64)


def test_buffers_of_plain_items_are_taken_as_their_bytes(client: memkv.Client) -> None:
    """Item types other than objects are moved as bytes, including ones the buffer protocol
    cannot describe (numpy datetime64) and struct fields whose names hold an "O"."""
    for name, arr in [
        ("f16", np.arange(8, dtype=np.float16)),
        ("dt64", np.arange(4).astype("M8[s]")),
        ("named", np.zeros(2, dtype=[("Offset", "<i4"), ("Other", "<f4")])),
    ]:
        client.put(f"plain/{name}", arr)
        assert client.get(f"plain/{name}") == arr.tobytes()
        out = np.zeros_like(arr)
        assert client.get_into(f"plain/{name}", out) == arr.nbytes
        assert out.tobytes() == arr.tobytes()


def test_a_value_that_is_not_a_buffer_is_a_type_error(client: memkv.Client) -> None:
    """A str or None has no buffer at all: a wrong argument type, as the docs say."""
    with pytest.raises(TypeError, match="value: expected a C-contiguous buffer .* got str"):
        client.put("k", "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"items\[0\] value: .* got NoneType"):
        client.put_many([("k", None)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="buffer: expected a writable, .* got int"):
        client.get_into("k", 7)  # type: ignore[arg-type]
    # A buffer refused for what it is stays a BufferError, not a TypeError.
    with pytest.raises(BufferError) as info:
        client.get_into("k", b"read-only")
    assert not isinstance(info.value, TypeError)
