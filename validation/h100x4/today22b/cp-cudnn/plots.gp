# Drawn by planner validate; run `gnuplot plots.gp` in this folder to draw again.
set terminal pngcairo size 900,860 font "sans,10"
set encoding utf8
set output "step_time.png"
set title "Step time, predicted against measured: four H100s, context parallelism (22)"
set xlabel "measured (s)"
set ylabel "predicted (s)"
unset logscale
set xrange [0.457316:3.38605]
set yrange [0.457316:3.38605]
set key top left box opaque
set grid
set size ratio -1
set samples 200
plot '+' using 1:(0.9*$1):(1.1*$1) with filledcurves lc rgb "#fde0dd" title "within 10%", \
     '+' using 1:(0.95*$1):(1.05*$1) with filledcurves lc rgb "#c7e9c0" title "within 5%", \
     x with lines lc rgb "black" lw 1.5 title "y = x", \
     "step_time_A.dat" using 1:2 with points pt 7 ps 1.3 lc rgb "#2166ac" title "half A", \
     "step_time_B.dat" using 1:2 with points pt 5 ps 1.3 lc rgb "#b2182b" title "half B (held out)", \
     "step_time_labels.dat" using 1:2:3 with labels offset 1,0.6 left font ",8" notitle

unset size
set output "peak_memory.png"
set title "Peak memory per GPU, predicted against measured: four H100s, context parallelism (22)"
set xlabel "measured (GiB)"
set ylabel "predicted (GiB)"
unset logscale
set xrange [29.1282:64.778]
set yrange [29.1282:64.778]
set key top left box opaque
set grid
set size ratio -1
set samples 200
plot '+' using 1:(0.9*$1):(1.1*$1) with filledcurves lc rgb "#fde0dd" title "within 10%", \
     '+' using 1:(0.95*$1):(1.05*$1) with filledcurves lc rgb "#c7e9c0" title "within 5%", \
     x with lines lc rgb "black" lw 1.5 title "y = x", \
     "peak_memory_A.dat" using 1:2 with points pt 7 ps 1.3 lc rgb "#2166ac" title "half A", \
     "peak_memory_B.dat" using 1:2 with points pt 5 ps 1.3 lc rgb "#b2182b" title "half B (held out)"

unset logscale
set size noratio 1,1
unset key
set key outside right top box
set grid ytics
set terminal pngcairo size 900,720 font "sans,10"
set output "memory_breakdown.png"
set title "Memory per GPU by category: left bar predicted, right bar measured\nfour H100s, context parallelism (22)"
set xlabel ""
set ylabel "GiB"
set xrange [-1:20]
set yrange [0:60.835]
set xtics ("llama3.2-1b-dp2cp2-seq32k" 0.5, "llama3.2-3b-tp2sp-cp2-seq32k" 3.5, "llama3.1-8b-cp4-z3-full-seq32k" 6.5, "llama2-7b-cp4-z3-full-seq32k" 9.5, "tinyllama-dp2cp2-mbs2-seq16k" 12.5, "llama3.2-3b-tp2sp-cp2-full-seq64k" 15.5, "llama3.1-8b-tp2-cp2-z1-full-seq32k" 18.5) rotate by -40 font ",8"
set style fill solid 0.9 border rgb "#333333"
set boxwidth 0.9
plot "memory_breakdown.dat" using 1:8 with boxes lc rgb "#999999" title "overhead", \
     "memory_breakdown.dat" using 1:7 with boxes lc rgb "#1a9850" title "comm-buffers", \
     "memory_breakdown.dat" using 1:6 with boxes lc rgb "#d73027" title "logits-loss", \
     "memory_breakdown.dat" using 1:5 with boxes lc rgb "#fc8d59" title "activations", \
     "memory_breakdown.dat" using 1:4 with boxes lc rgb "#fee090" title "optimizer-states", \
     "memory_breakdown.dat" using 1:3 with boxes lc rgb "#91bfdb" title "gradients", \
     "memory_breakdown.dat" using 1:2 with boxes lc rgb "#4575b4" title "parameters"
