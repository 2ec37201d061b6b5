"""The console of a command outlives its reader: a closed pipe or a hung-up terminal."""

import errno
import os

import pytest

from shoal.console import ConsoleStream


def test_a_pipe_whose_reader_left_takes_every_later_write():
    """`| head`: the first failed write points the stream at /dev/null, so that neither it
    nor what is still buffered fails again (at exit it did: exit code 120)."""
    read, write = os.pipe()
    os.close(read)
    stream = os.fdopen(write, "w")
    console = ConsoleStream(stream)
    assert console.write("a line\n") == len("a line\n")
    console.flush()
    console.write("x" * 100_000)  # more than a pipe holds: still dropped, not raised
    console.flush()
    stream.close()  # its own flush: to /dev/null


def test_a_disk_that_refuses_a_write_is_still_an_error():
    class Full:
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError, match="No space left"):
        ConsoleStream(Full()).write("a line\n")
