from patch_queue.cli import main

main()
