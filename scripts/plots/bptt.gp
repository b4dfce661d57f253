# bptt.png: ‖∂L/∂h_{p-j}‖ against the steps back j (log scale), for the
# linear and the tanh recurrence with W_h = rho·U, one line per rho, and for
# the RNN and LSTM at initialisation and after training (qkv bptt).
# Variables: infile (grads.csv), outfile, rhos ("0.5 0.9 1 1.1 1.5"),
# trained (0 when grads.csv has no trained model's rows; default 1).
load dir."/common.gp"
set terminal pngcairo size 1800,650 font "WenQuanYi Zen Hei,12" enhanced
set output outfile
set multiplot layout 1,3 title "梯度随时间反向传播：每退一步乘一次 W_h" font ",16"
set xlabel "向前回溯的步数 j"
set ylabel "‖∂L/∂h_{p−j}‖（对数）"
# (stats before the log scale: gnuplot 5.0 refuses it on a log axis)
stats infile using (log10_or(column("grad_norm"), 1e9)) nooutput
lo = STATS_min
stats infile using (log10_or(column("grad_norm"), -1e9)) nooutput
eval log_minor_ytics(lo, STATS_max)
set logscale y
set format y "10^{%L}"
# up to 16 rhos (qkv bptt's limit): 8 colours, solid then dashed, and
# a key of at most 8 rows a column
set key bottom left box opaque font ",10" maxrows 8
colr(i) = word("#1f77b4 #2ca02c #7f7f7f #ff7f0e #d62728 #9467bd #8c564b #17becf", (i - 1) % 8 + 1)
dash(i) = 1 + (i - 1) / 8
sel(m, a, r, v) = (strcol("model") eq m && strcol("activation") eq a \
                   && strcol("rho") eq r) ? v : 1/0
set title "线性递归 h_t = x_tW_x + h_{t−1}W_h：恰好每步乘 ρ"
plot for [i=1:words(rhos)] infile using "steps_back":(sel("rnn", "linear", word(rhos, i), \
         column("grad_norm"))) with lines lw 2 lc rgb colr(i) dt dash(i) title "ρ = ".word(rhos, i)
set title "tanh 递归：tanh′ ≤ 1 让梯度衰减得更快"
plot for [i=1:words(rhos)] infile using "steps_back":(sel("rnn", "tanh", word(rhos, i), \
         column("grad_norm"))) with lines lw 2 lc rgb colr(i) dt dash(i) title "ρ = ".word(rhos, i)
only(m, v) = strcol("model") eq m ? v : 1/0
# qkv bptt --train-steps 0 measures no trained model: no such lines, and
# no key entries for them (trained: the CSV's rnn-trained rows)
if (!exists("trained")) trained = 1
set title trained ? "PyTorch 初始化的 RNN 与 LSTM：训练前后" : "PyTorch 初始化的 RNN 与 LSTM"
plot infile using "steps_back":(only("rnn-init", column("grad_norm"))) \
         with lines lw 2 lc rgb c_unscaled dt 2 title "RNN 初始化", \
     infile using "steps_back":(only("rnn-trained", column("grad_norm"))) \
         with lines lw 2 lc rgb c_unscaled title (trained ? "RNN 训练后" : ""), \
     infile using "steps_back":(only("lstm-init", column("grad_norm"))) \
         with lines lw 2 lc rgb "#2ca02c" dt 2 title "LSTM 初始化", \
     infile using "steps_back":(only("lstm-trained", column("grad_norm"))) \
         with lines lw 2 lc rgb "#2ca02c" title (trained ? "LSTM 训练后" : "")
unset multiplot
