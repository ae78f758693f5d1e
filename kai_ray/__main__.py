from kai_ray.cli import main

main()
