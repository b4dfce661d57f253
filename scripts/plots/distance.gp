# distance.png: test accuracy against the distance between a name and its
# pronoun, one line per model, mean ± sd over seeds (qkv distance), the
# bar cut at 0 and 1, an accuracy's bounds (two seeds' sd can pass them).
# Variables: infile (summary.csv), outfile, models ("attention rnn ...").
load dir."/common.gp"
set terminal pngcairo size 1200,700 font "WenQuanYi Zen Hei,12" enhanced
set output outfile
set title "RNN 的长距离依赖：代词与先行词之间隔了 k 个词" font ",16"
set xlabel "距离 k（名字与代词之间插入的中性词数）"
set ylabel "测试准确率"
# k = 0 has no logarithm: the axis shows log2(k + 1), labelled with k
set xtics ("0" 0, "2" log(3)/log(2), "4" log(5)/log(2), "8" log(9)/log(2), \
           "16" log(17)/log(2), "32" log(33)/log(2), "64" log(65)/log(2), "128" log(129)/log(2), \
           "256" log(257)/log(2), "512" log(513)/log(2), "1024" log(1025)/log(2))
x(k) = log(k + 1) / log(2)
# the right end from the data: tics past it would leave an empty band
stats infile using (column("distance")) nooutput
set xrange [-0.3:x(STATS_max) + 0.3]
set yrange [0:1.05]
set key center left box opaque
chance = 1.0 / 6 # the pronoun's gender leaves 6 of the 12 names
color(m) = m eq "attention" ? c_scaled : m eq "rnn" ? c_unscaled \
           : m eq "lstm" ? "#2ca02c" : "#9467bd"
label(m) = m eq "attention" ? "自注意力 attention" : m eq "rnn" ? "RNN (tanh)" \
           : m eq "lstm" ? "LSTM" : "GRU"
sel(m, v) = strcol("model") eq m ? v : 1/0
lo(v) = v < 0 ? 0 : v
hi(v) = v > 1 ? 1 : v
plot for [i=1:words(models)] infile \
         using (sel(word(models, i), x(column("distance")))):"acc_mean" \
               :(lo(column("acc_mean") - column("acc_sd"))) \
               :(hi(column("acc_mean") + column("acc_sd"))) \
         with yerrorlines lw 2 pt 7 ps 0.8 lc rgb color(word(models, i)) \
         title label(word(models, i)), \
     chance with lines dt 2 lc rgb "#888888" title "只看代词性别的猜测 (1/6)"
