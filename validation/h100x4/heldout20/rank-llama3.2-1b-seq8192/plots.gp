# Drawn by planner validate; run `gnuplot plots.gp` in this folder to draw again.
set terminal pngcairo size 900,860 font "sans,10"
set encoding utf8

unset logscale
set size noratio 1,1
set key top left box
set grid
set terminal pngcairo size 900,600 font "sans,10"
set output "ranking.png"
set title "Ranking check: step time by predicted rank\nranking check: top 5 of planner plan --model llama-3.2-1b --gpus 4xH100 --seq 8192 --global-batch 8"
set xlabel "predicted rank (1 = plan's pick)"
set ylabel "s"
set xrange [0.5:5.5]
set xtics 1
set autoscale y
plot "ranking.dat" using 1:2 with linespoints pt 7 title "predicted", \
     "ranking.dat" using 1:3 with linespoints pt 5 title "measured"
