-- The compose stack's sample source (deploy/docker-compose.yml, service sqlserver-init):
--   sqlcmd -S sqlserver -U sa -C -b -i /init/init.sql
-- run as sa once the server is healthy, again at every `docker compose up`: every step checks
-- before it acts.
--
-- 1. the database shop, with ALLOW_SNAPSHOT_ISOLATION ON (exact snapshots);
-- 2. two tables, dbo.customers and dbo.orders, and CDC on the database and on both tables;
-- 3. the login and user cdc_assets, which deploy/cdc_assets.production.yaml connects as:
--    db_datareader, SELECT on the schema cdc, VIEW DATABASE STATE (the last log scans), VIEW
--    SERVER STATE (the log position of an exact snapshot) and read access to the CDC job tables in
--    msdb (the capture health checks);
-- 4. a few rows, then a wait until the capture job has established every capture instance, so
--    that the code location finds every table at its first load.
--
-- The password of cdc_assets comes from the environment variable CDC_ASSETS_DB_PASSWORD (sqlcmd
-- reads environment variables as scripting variables). It must satisfy SQL Server's password
-- policy (at least 8 characters from three of: upper case, lower case, digits, symbols) and
-- contain neither a single quote nor a closing brace.
:on error exit
SET NOCOUNT ON;
GO

-- 1. The database ---------------------------------------------------------------------------
IF DB_ID(N'shop') IS NULL
    CREATE DATABASE [shop];
GO
ALTER DATABASE [shop] SET ALLOW_SNAPSHOT_ISOLATION ON;
GO

-- 3a. The login (server level) --------------------------------------------------------------
USE [master];
GO
IF NOT EXISTS (SELECT 1 FROM sys.server_principals WHERE name = N'cdc_assets')
    CREATE LOGIN [cdc_assets]
        WITH PASSWORD = N'$(CDC_ASSETS_DB_PASSWORD)', DEFAULT_DATABASE = [shop],
        CHECK_EXPIRATION = OFF;
ELSE
    ALTER LOGIN [cdc_assets] WITH PASSWORD = N'$(CDC_ASSETS_DB_PASSWORD)';
GO
GRANT VIEW SERVER STATE TO [cdc_assets];
GO

-- 2. Tables and CDC ---------------------------------------------------------------------------
USE [shop];
GO
IF OBJECT_ID(N'dbo.customers', N'U') IS NULL
    CREATE TABLE dbo.customers (
        customer_id int IDENTITY(1, 1) NOT NULL CONSTRAINT pk_customers PRIMARY KEY,
        name nvarchar(100) NOT NULL,
        email varchar(254) NULL,
        vip bit NOT NULL CONSTRAINT df_customers_vip DEFAULT 0,
        created_at datetime2(3) NOT NULL CONSTRAINT df_customers_created_at DEFAULT SYSUTCDATETIME()
    );
GO
IF OBJECT_ID(N'dbo.orders', N'U') IS NULL
    CREATE TABLE dbo.orders (
        order_id bigint IDENTITY(1, 1) NOT NULL CONSTRAINT pk_orders PRIMARY KEY,
        customer_id int NOT NULL
            CONSTRAINT fk_orders_customers REFERENCES dbo.customers (customer_id),
        amount decimal(12, 2) NOT NULL,
        status varchar(20) NOT NULL,
        ordered_at datetimeoffset(7) NOT NULL
            CONSTRAINT df_orders_ordered_at DEFAULT SYSDATETIMEOFFSET()
    );
GO
IF NOT EXISTS (SELECT 1 FROM sys.databases WHERE name = N'shop' AND is_cdc_enabled = 1)
    EXEC sys.sp_cdc_enable_db;
GO
IF NOT EXISTS (
    SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(N'dbo.customers') AND is_tracked_by_cdc = 1
)
    EXEC sys.sp_cdc_enable_table
        @source_schema = N'dbo',
        @source_name = N'customers',
        @role_name = NULL,
        @supports_net_changes = 1;
GO
IF NOT EXISTS (
    SELECT 1 FROM sys.tables WHERE object_id = OBJECT_ID(N'dbo.orders') AND is_tracked_by_cdc = 1
)
    EXEC sys.sp_cdc_enable_table
        @source_schema = N'dbo',
        @source_name = N'orders',
        @role_name = NULL,
        @supports_net_changes = 1;
GO

-- 3b. The user in shop ------------------------------------------------------------------------
IF DATABASE_PRINCIPAL_ID(N'cdc_assets') IS NULL
    CREATE USER [cdc_assets] FOR LOGIN [cdc_assets];
GO
IF IS_ROLEMEMBER(N'db_datareader', N'cdc_assets') = 0
    ALTER ROLE [db_datareader] ADD MEMBER [cdc_assets];
GO
GRANT SELECT ON SCHEMA::[cdc] TO [cdc_assets];
GRANT VIEW DATABASE STATE TO [cdc_assets];
GO

-- 3c. The user in msdb: the CDC jobs and SQL Server Agent's job activity (health checks) -------
USE [msdb];
GO
IF DATABASE_PRINCIPAL_ID(N'cdc_assets') IS NULL
    CREATE USER [cdc_assets] FOR LOGIN [cdc_assets];
GO
GRANT SELECT ON dbo.cdc_jobs TO [cdc_assets];
GRANT SELECT ON dbo.sysjobactivity TO [cdc_assets];
GO

-- 4. Sample rows, then wait for the capture job -----------------------------------------------
USE [shop];
GO
IF NOT EXISTS (SELECT 1 FROM dbo.customers)
BEGIN
    INSERT INTO dbo.customers (name, email, vip)
    VALUES (N'Ada Lovelace', 'ada@example.com', 1),
           (N'Alan Turing', 'alan@example.com', 0),
           (N'Grace Hopper', NULL, 1);
    INSERT INTO dbo.orders (customer_id, amount, status)
    SELECT customer_id, 19.90 * customer_id, 'new' FROM dbo.customers;
END;
GO
DECLARE @deadline datetime2 = DATEADD(SECOND, 180, SYSUTCDATETIME());
WHILE EXISTS (SELECT 1 FROM cdc.change_tables WHERE start_lsn IS NULL)
BEGIN
    IF SYSUTCDATETIME() > @deadline
    BEGIN
        RAISERROR (
            N'After 180 s the CDC capture job has not yet established every capture instance: is SQL Server Agent running (MSSQL_AGENT_ENABLED=true)?',
            16, 1
        );
        BREAK;
    END;
    WAITFOR DELAY '00:00:02';
END;
GO
PRINT N'init.sql: database shop ready, CDC on dbo.customers and dbo.orders, login cdc_assets.';
GO
