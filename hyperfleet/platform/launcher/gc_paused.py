"""The first module of the in-process pool's fork-server preload (:mod:`.inprocess`): its
import turns the garbage collector off (:func:`hyperfleet.startup.pause`) while the server
imports the trial runtime (torch) and the recorder. The server itself only forks; each worker
it forks turns the collector back on once it has started (:func:`hyperfleet.startup.resume`,
in :func:`~hyperfleet.platform.launcher.inprocess.inprocess_worker`). Nothing else imports this."""

from hyperfleet import startup

startup.pause()
