"""Managed memory (cuMemAllocManaged) through rgpu (tests/e2e/managed_test.c).

The server allocates it and the client maps its copy at the same address, the two kept in step
at call boundaries like mapped host memory (client/mapped_memory.h): host writes reach copies,
memsets and kernels, and what those wrote is in the host's copy once a synchronizing call
returns. cuMemFree ends it on both ends."""
import re

from conftest import BUILD, IMAGE, run_client

PROGRAM = str(BUILD / "bin/managed_test")


def test_managed_memory_is_shared_between_host_and_device(server):
    r = run_client([PROGRAM, IMAGE], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "managed_test: all passed" in r.stdout, r.stdout + r.stderr
    attrs = dict(re.findall(r"managed_test: attribute (\w+)=(-?\d+)", r.stdout))
    # Programs must synchronize before touching managed memory from the host: the device says so.
    assert attrs == {"MANAGED_MEMORY": "1", "CONCURRENT_MANAGED_ACCESS": "0", "PAGEABLE_MEMORY_ACCESS": "0",
                     "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST": "0"}, r.stdout
    # cuMemFree unmapped the client's copy too.
    assert "managed_test: unmapped after free=1" in r.stdout, r.stdout
    assert server.alive()


def test_managed_memory_without_write_tracking(server):
    """Where userfaultfd is refused, the client compares pages instead: same results."""
    r = run_client([str(BUILD / "bin/no_userfaultfd"), PROGRAM, IMAGE], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "managed_test: all passed" in r.stdout, r.stdout + r.stderr


def test_address_taken_in_the_client_is_refused_with_a_reason(server):
    r = run_client([PROGRAM, "collide"], server)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"managed_test: \d+ checks, 0 failed", r.stdout), r.stdout + r.stderr
    assert "cuMemAllocManaged is not supported here" in r.stderr, r.stderr
    assert "cannot map its copy there" in r.stderr, r.stderr
    assert server.alive()
