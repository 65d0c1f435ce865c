from hyperfleet import startup

startup.pause()  # before the command's imports; the controller resumes once it has started

from hyperfleet.platform.cli import main  # noqa: E402

main()
