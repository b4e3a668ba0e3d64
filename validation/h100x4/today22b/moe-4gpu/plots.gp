# Drawn by planner validate; run `gnuplot plots.gp` in this folder to draw again.
set terminal pngcairo size 900,860 font "sans,10"
set encoding utf8
set output "step_time.png"
set title "Step time, predicted against measured: four H100s, mixture of experts"
set xlabel "measured (s)"
set ylabel "predicted (s)"
unset logscale
set xrange [0.131834:1.02715]
set yrange [0.131834:1.02715]
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
set title "Peak memory per GPU, predicted against measured: four H100s, mixture of experts"
set xlabel "measured (GiB)"
set ylabel "predicted (GiB)"
unset logscale
set xrange [15.2302:37.6501]
set yrange [15.2302:37.6501]
set key top left box opaque
set grid
set size ratio -1
set samples 200
plot '+' using 1:(0.9*$1):(1.1*$1) with filledcurves lc rgb "#fde0dd" title "within 10%", \
     '+' using 1:(0.95*$1):(1.05*$1) with filledcurves lc rgb "#c7e9c0" title "within 5%", \
     x with lines lc rgb "black" lw 1.5 title "y = x", \
     "peak_memory_B.dat" using 1:2 with points pt 5 ps 1.3 lc rgb "#b2182b" title "half B (held out)", \
     "peak_memory_labels.dat" using 1:2:3 with labels offset 1,0.6 left font ",8" notitle

unset logscale
set size noratio 1,1
unset key
set key outside right top box
set grid ytics
set terminal pngcairo size 900,720 font "sans,10"
set output "memory_breakdown.png"
set title "Memory per GPU by category: left bar predicted, right bar measured\nfour H100s, mixture of experts"
set xlabel ""
set ylabel "GiB"
set xrange [-1:8]
set yrange [0:35.3583]
set xtics ("mixtral2b5-dp4-ep2" 0.5, "mixtral2b5-dp4-ep4" 3.5, "mixtral2b5-dp2-ep2-tp2" 6.5) rotate by -40 font ",8"
set style fill solid 0.9 border rgb "#333333"
set boxwidth 0.9
plot "memory_breakdown.dat" using 1:8 with boxes lc rgb "#999999" title "overhead", \
     "memory_breakdown.dat" using 1:7 with boxes lc rgb "#1a9850" title "comm-buffers", \
     "memory_breakdown.dat" using 1:6 with boxes lc rgb "#d73027" title "logits-loss", \
     "memory_breakdown.dat" using 1:5 with boxes lc rgb "#fc8d59" title "activations", \
     "memory_breakdown.dat" using 1:4 with boxes lc rgb "#fee090" title "optimizer-states", \
     "memory_breakdown.dat" using 1:3 with boxes lc rgb "#91bfdb" title "gradients", \
     "memory_breakdown.dat" using 1:2 with boxes lc rgb "#4575b4" title "parameters"
