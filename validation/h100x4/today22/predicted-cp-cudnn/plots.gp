# Drawn by planner validate; run `gnuplot plots.gp` in this folder to draw again.
set terminal pngcairo size 900,860 font "sans,10"
set encoding utf8
