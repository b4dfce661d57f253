# variance.png: Var(q·k) against d_k on log-log axes, with the theory lines.
# Variables: infile (variance.csv), outfile.
load dir."/common.gp"
set terminal pngcairo size 1000,750 font "WenQuanYi Zen Hei,12" enhanced
set output outfile
set title "点积方差：Var(q·k) ≈ d_k，除以 √d_k 后 ≈ 1" font ",16"
set logscale xy
set xlabel "维度 d_k"
set ylabel "方差 Var"
set key top left
set xrange [2:1024]
set yrange [0.3:2000]
plot x with lines lw 3 dt 2 lc rgb "#999999" title "理论 Var = d_k", \
     1 with lines lw 3 dt 3 lc rgb "#999999" title "理论 Var = 1", \
     infile using "d_k":"var_unscaled" \
         with linespoints lw 2 pt 7 ps 1.2 lc rgb c_unscaled title "实测 Var(q·k)", \
     infile using "d_k":"var_scaled" \
         with linespoints lw 2 pt 5 ps 1.2 lc rgb c_scaled title "实测 Var(q·k/√d_k)"
