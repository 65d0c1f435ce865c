from hyperfleet.platform.cli import main

main()
