# Drawn by planner validate; run `gnuplot plots.gp` in this folder to draw again.
set terminal pngcairo size 900,860 font "sans,10"
set encoding utf8
set output "step_time.png"
set title "Step time, predicted against measured: four H100s: today's dense models (issue 31)"
set xlabel "measured (s)"
set ylabel "predicted (s)"
unset logscale
set xrange [0.137422:0.59237]
set yrange [0.137422:0.59237]
set key top left box opaque
set grid
set size ratio -1
set samples 200
plot '+' using 1:(0.9*$1):(1.1*$1) with filledcurves lc rgb "#fde0dd" title "within 10%", \
     '+' using 1:(0.95*$1):(1.05*$1) with filledcurves lc rgb "#c7e9c0" title "within 5%", \
     x with lines lc rgb "black" lw 1.5 title "y = x", \
     "step_time_B.dat" using 1:2 with points pt 5 ps 1.3 lc rgb "#b2182b" title "half B (held out)", \
     "step_time_labels.dat" using 1:2:3 with labels offset 1,0.6 left font ",8" notitle

unset size
set output "peak_memory.png"
set title "Peak memory per GPU, predicted against measured: four H100s: today's dense models (issue 31)"
set xlabel "measured (GiB)"
set ylabel "predicted (GiB)"
unset logscale
set xrange [22.6553:48.4538]
set yrange [22.6553:48.4538]
set key top left box opaque
set grid
set size ratio -1
set samples 200
plot '+' using 1:(0.9*$1):(1.1*$1) with filledcurves lc rgb "#fde0dd" title "within 10%", \
     '+' using 1:(0.95*$1):(1.05*$1) with filledcurves lc rgb "#c7e9c0" title "within 5%", \
     x with lines lc rgb "black" lw 1.5 title "y = x", \
     "peak_memory_B.dat" using 1:2 with points pt 5 ps 1.3 lc rgb "#b2182b" title "half B (held out)"

unset logscale
set size noratio 1,1
unset key
set key outside right top box
set grid ytics
set terminal pngcairo size 900,720 font "sans,10"
set output "memory_breakdown.png"
set title "Memory per GPU by category: left bar predicted, right bar measured\nfour H100s: today's dense models (issue 31)"
set xlabel ""
set ylabel "GiB"
set xrange [-1:11]
set yrange [0:45.5044]
set xtics ("qwen2.5-1.5b-dp4-z1-bf16-seq4096" 0.5, "qwen2.5-1.5b-dp2-tp2-sp-bf16-seq4096" 3.5, "mistral1.3b-window4096-dp4-z1-bf16-seq16384" 6.5, "mistral1.3b-nowindow-dp4-z1-bf16-seq16384" 9.5) rotate by -40 font ",8"
set style fill solid 0.9 border rgb "#333333"
set boxwidth 0.9
plot "memory_breakdown.dat" using 1:8 with boxes lc rgb "#999999" title "overhead", \
     "memory_breakdown.dat" using 1:7 with boxes lc rgb "#1a9850" title "comm-buffers", \
     "memory_breakdown.dat" using 1:6 with boxes lc rgb "#d73027" title "logits-loss", \
     "memory_breakdown.dat" using 1:5 with boxes lc rgb "#fc8d59" title "activations", \
     "memory_breakdown.dat" using 1:4 with boxes lc rgb "#fee090" title "optimizer-states", \
     "memory_breakdown.dat" using 1:3 with boxes lc rgb "#91bfdb" title "gradients", \
     "memory_breakdown.dat" using 1:2 with boxes lc rgb "#4575b4" title "parameters"
