# saturation.png: one column per d_k; rows: loss, gradient norms (log),
# attention entropy, softmax Jacobian norm; scaled (blue) vs unscaled (red).
# Variables: infile (runs.csv), outfile, dks ("4 16 ..."), seed, optim.
load dir."/common.gp"
set terminal pngcairo size 1800,1200 font "WenQuanYi Zen Hei,11" enhanced
set output outfile
n = words(dks)
set multiplot layout 4,n title sprintf("√d_k 缩放与 Softmax 饱和（%s，蓝：除以 √d_k，红：不缩放）", optim) font ",16"
sel(dk, sc, v) = ($1 == dk && $2 == sc && $3 == seed) ? v : 1/0
set xlabel "step"
do for [i=1:n] {
    dk = word(dks, i) + 0
    set title sprintf("d_k = %d：损失", dk)
    set ylabel (i == 1 ? "loss" : "")
    unset logscale y
    set autoscale y
    plot infile using 4:(sel(dk, 1, $5)) with lines lw 2 lc rgb c_scaled, \
         infile using 4:(sel(dk, 0, $5)) with lines lw 2 lc rgb c_unscaled
}
do for [i=1:n] {
    dk = word(dks, i) + 0
    set title sprintf("d_k = %d：梯度范数 ‖∂L/∂S‖（实线）‖∂L/∂Wq‖（虚线）", dk) font ",9"
    set ylabel (i == 1 ? "gradient norm (log)" : "")
    set logscale y
    set format y "10^{%L}"
    plot infile using 4:(sel(dk, 1, $11)) with lines lw 2 lc rgb c_scaled, \
         infile using 4:(sel(dk, 0, $11)) with lines lw 2 lc rgb c_unscaled, \
         infile using 4:(sel(dk, 1, $8)) with lines lw 1 dt 2 lc rgb c_scaled, \
         infile using 4:(sel(dk, 0, $8)) with lines lw 1 dt 2 lc rgb c_unscaled
}
unset logscale y
set format y "%g"
do for [i=1:n] {
    dk = word(dks, i) + 0
    set title sprintf("d_k = %d：注意力熵", dk) font ",11"
    set ylabel (i == 1 ? "entropy (nats)" : "")
    set yrange [0:*]
    plot infile using 4:(sel(dk, 1, $12)) with lines lw 2 lc rgb c_scaled, \
         infile using 4:(sel(dk, 0, $12)) with lines lw 2 lc rgb c_unscaled
}
do for [i=1:n] {
    dk = word(dks, i) + 0
    set title sprintf("d_k = %d：Jacobian 范数", dk)
    set ylabel (i == 1 ? "‖diag(a) − aaᵀ‖_F" : "")
    set yrange [0:*]
    plot infile using 4:(sel(dk, 1, $14)) with lines lw 2 lc rgb c_scaled, \
         infile using 4:(sel(dk, 0, $14)) with lines lw 2 lc rgb c_unscaled
}
unset multiplot
