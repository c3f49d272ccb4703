"""Client threads for the HTTP shell tests, whose failures are not lost: an assertion or error
inside a thread is collected, and join() raises after the last thread ends, naming each one
(a plain threading.Thread only prints it and the test would pass). Threads still running at
the deadline fail too.

    clients = Threads(fn, [(arg,), ...])   # starts one thread per argument tuple
    clients.join(90)                       # AssertionError: errors, or threads still running
"""
import threading
import time


class Threads:
    def __init__(self, fn, arg_tuples):
        self.errors = []
        self.lock = threading.Lock()

        def guarded(*args):
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - every failure is reported by join()
                with self.lock:
                    self.errors.append(f"{fn.__name__}{args}: {e!r}")

        self.threads = [threading.Thread(target=guarded, args=a, daemon=True) for a in arg_tuples]
        for t in self.threads:
            t.start()

    def join(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = sum(t.is_alive() for t in self.threads)
        assert alive == 0, f"{alive} of {len(self.threads)} client threads still running after {timeout_s} s"
        assert not self.errors, f"{len(self.errors)} client threads failed:\n" + "\n".join(self.errors)
