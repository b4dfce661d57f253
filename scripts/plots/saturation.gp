# saturation.png: one column per d_k; rows: loss, gradient norms (log),
# attention entropy, softmax Jacobian norm; scaled (blue) vs unscaled (red).
# Variables: infile (runs.csv), outfile, dks ("4 16 ..."), seed, optim.
load dir."/common.gp"
set terminal pngcairo size 1800,1200 font "WenQuanYi Zen Hei,11" enhanced
set output outfile
n = words(dks)
set multiplot layout 4,n title sprintf("√d_k 缩放与 Softmax 饱和（%s，蓝：除以 √d_k，红：不缩放）", optim) font ",16"
# the value v on rows of this d_k, scaling and seed (columns by name)
mine(dk, sc) = column("d_k") == dk && column("scaled") == sc && column("seed") == seed
sel(dk, sc, v) = mine(dk, sc) ? v : 1/0
set xlabel "训练步数"
do for [i=1:n] {
    dk = word(dks, i) + 0
    set title sprintf("d_k = %d：损失", dk)
    set ylabel (i == 1 ? "损失" : "")
    unset logscale y
    set autoscale y
    plot infile using "step":(sel(dk, 1, column("loss"))) with lines lw 2 lc rgb c_scaled, \
         infile using "step":(sel(dk, 0, column("loss"))) with lines lw 2 lc rgb c_unscaled
}
do for [i=1:n] {
    dk = word(dks, i) + 0
    set title sprintf("d_k = %d：梯度范数 ‖∂L/∂S‖（实线）‖∂L/∂Wq‖（虚线）", dk) font ",9"
    set ylabel (i == 1 ? "梯度范数（对数）" : "")
    # a gradient of exactly 0 (softmax saturated past float's range) has no
    # place on a log axis: its line breaks there, and the panel says why
    unset logscale y # the last panel's, during the stats below
    zeros = 0
    set style textbox opaque noborder
    do for [sc=0:1] {
        stats infile using (mine(dk, sc) && column("gnorm_scores") == 0 ? 1 : 0) nooutput
        zeros = zeros + STATS_sum
    }
    lo = 1e9
    hi = -1e9
    do for [sc=0:1] {
        do for [c in "gnorm_scores gnorm_wq"] {
            # every row a valid point (the default where it is not this
            # panel's), so that stats never runs out of them
            stats infile using (mine(dk, sc) ? log10_or(column(c), 1e9) : 1e9) nooutput
            lo = STATS_min < lo ? STATS_min : lo
            stats infile using (mine(dk, sc) ? log10_or(column(c), -1e9) : -1e9) nooutput
            hi = STATS_max > hi ? STATS_max : hi
        }
    }
    eval log_minor_ytics(lo, hi)
    set logscale y # after the stats: gnuplot 5.0 refuses them on a log axis
    set format y "10^{%L}"
    unset label 1
    if (zeros > 0) {
        set label 1 sprintf("断开处梯度恰为 0（%d 处）", zeros) \
            at graph 0.5, graph 0.07 center font ",9" front boxed
    }
    plot infile using "step":(sel(dk, 1, column("gnorm_scores"))) with lines lw 2 lc rgb c_scaled, \
         infile using "step":(sel(dk, 0, column("gnorm_scores"))) \
             with lines lw 2 lc rgb c_unscaled, \
         infile using "step":(sel(dk, 1, column("gnorm_wq"))) \
             with lines lw 1 dt 2 lc rgb c_scaled, \
         infile using "step":(sel(dk, 0, column("gnorm_wq"))) with lines lw 1 dt 2 lc rgb c_unscaled
}
unset logscale y
unset label 1
set mytics default
set format y "%g"
do for [i=1:n] {
    dk = word(dks, i) + 0
    set title sprintf("d_k = %d：注意力熵", dk) font ",11"
    set ylabel (i == 1 ? "熵（nats）" : "")
    set yrange [0:*]
    plot infile using "step":(sel(dk, 1, column("entropy"))) with lines lw 2 lc rgb c_scaled, \
         infile using "step":(sel(dk, 0, column("entropy"))) with lines lw 2 lc rgb c_unscaled
}
do for [i=1:n] {
    dk = word(dks, i) + 0
    set title sprintf("d_k = %d：Softmax 雅可比范数", dk)
    set ylabel (i == 1 ? "‖diag(a) − aaᵀ‖_F" : "")
    set yrange [0:*]
    plot infile using "step":(sel(dk, 1, column("jacobian"))) with lines lw 2 lc rgb c_scaled, \
         infile using "step":(sel(dk, 0, column("jacobian"))) with lines lw 2 lc rgb c_unscaled
}
unset multiplot
