# parallel.png: the tape's critical path and the time of a training step
# against the sentence length T, per model (qkv parallel).
# Variables: infile (steps.csv), outfile, models, threads (the second thread count).
load dir."/common.gp"
set terminal pngcairo size 1500,650 font "WenQuanYi Zen Hei,12" enhanced
set output outfile
set multiplot layout 1,2 title "RNN 只能一步一步算：关键路径与每步耗时随序列长度 T 的变化" font ",16"
color(m) = m eq "attention" ? c_scaled : m eq "rnn" ? c_unscaled \
           : m eq "lstm" ? "#2ca02c" : "#9467bd"
label(m) = m eq "attention" ? "自注意力" : m eq "rnn" ? "RNN" : m eq "lstm" ? "LSTM" : "GRU"
sel(m, th, v) = (strcol("model") eq m && column("threads") == th) ? v : 1/0
set logscale xy 2
set xlabel "序列长度 T"
set key top left box opaque
set title "关键路径：最长的一串前后依赖的运算（与机器无关）"
set ylabel "关键路径长度（节点数）"
set yrange [2:*]
plot for [i=1:words(models)] infile using "T":(sel(word(models, i), 1, column("critical_path"))) \
         with linespoints lw 2 pt 7 lc rgb color(word(models, i)) \
         title label(word(models, i))
# qkv parallel --threads 1 times one thread only: no dashed lines
set title threads > 1 ? sprintf("每个训练步的耗时（实线 1 线程，虚线 %d 线程）", threads) \
    : "每个训练步的耗时（1 线程）"
set ylabel "毫秒 / 步"
set yrange [*:*] # the first panel's floor of 2 nodes would hide every step under 2 ms
set logscale y 10
plot for [i=1:words(models)] infile using "T":(sel(word(models, i), 1, column("ms_per_step"))) \
         with linespoints lw 2 pt 7 lc rgb color(word(models, i)) \
         title label(word(models, i)), \
     for [i=1:words(models)] infile \
         using "T":(sel(word(models, i), threads, column("ms_per_step"))) \
         with linespoints lw 1 dt 2 pt 6 lc rgb color(word(models, i)) notitle
unset multiplot
