-- Per order: its lines, items and the amount of its lines, beside the order's own total.
select
    o.order_id,
    o.customer_id,
    o.total,
    count(l.`line no`) as lines,
    coalesce(sum(l.quantity), 0) as items,
    coalesce(sum(l.quantity * l.`unit price`), 0) as lines_amount
from {{ source('cdc', 'dbo_orders_mirror') }} as o
left join {{ source('cdc', 'dbo_order_lines_d7caa1_mirror') }} as l
    on l.order_id = o.order_id
group by o.order_id, o.customer_id, o.total
