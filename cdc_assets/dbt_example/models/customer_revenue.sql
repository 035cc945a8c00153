-- Per customer: orders, items and revenue (the sum of the orders' totals).
select
    c.customer_id,
    c.name,
    c.country,
    count(t.order_id) as orders,
    coalesce(sum(t.items), 0) as items,
    coalesce(sum(t.total), 0) as revenue
from {{ source('cdc', 'dbo_customers_mirror') }} as c
left join {{ ref('order_totals') }} as t
    on t.customer_id = c.customer_id
group by c.customer_id, c.name, c.country
