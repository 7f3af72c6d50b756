--[[ rgpu's job_submit.lua: a job's --rgpu request becomes a cluster license slurmctld counts.

The SPANK plugin (rgpu_spank.so) writes the request of srun/sbatch/salloc --rgpu=N
[--rgpu-share=P] into the job control environment (RGPU_GPUS, RGPU_SHARE; prolog and epilog see them with
the prefix SPANK_), which slurmctld passes here as job_desc.spank_job_env. This adds LICENSE:N*P (hundredths of a GPU) to
the job's licenses, replacing any LICENSE the user wrote with -L. slurm.conf sizes the license
from the pool (rgpu-slurm-licenses prints the line: Licenses=rgpu:<100 x GPUs>), so jobs beyond
what is free pend with reason Licenses, and one asking for more than the whole pool is refused
at submission. docs/slurm.md.

Install: slurm.conf JobSubmitPlugins=lua and this file as job_submit.lua beside slurm.conf (a
site that has its own job_submit.lua calls rgpu_job_submit(job_desc) from its
slurm_job_submit instead). ]]

local LICENSE = "rgpu"
local SHARE_FULL = 100

-- The request in the job control environment: hundredths of a GPU, nil when there is none,
-- or nil and the reason when it is malformed.
local function rgpu_units(job_desc)
    local env = job_desc.spank_job_env
    local gpus, share = nil, SHARE_FULL
    if env == nil then
        return nil
    end
    for _, kv in pairs(env) do
        local k, v = string.match(kv, "^([^=]+)=(.*)$")
        -- as slurmctld stores them: without the SPANK_ that prolog and epilog see
        if k == "RGPU_GPUS" or k == "SPANK_RGPU_GPUS" then
            gpus = tonumber(v)
        elseif k == "RGPU_SHARE" or k == "SPANK_RGPU_SHARE" then
            share = tonumber(v)
        end
    end
    if gpus == nil then
        return nil
    end
    if gpus ~= math.floor(gpus) or gpus < 1 or gpus > 64 then
        return nil, "--rgpu=" .. tostring(gpus) .. ": the number of remote GPUs, 1 to 64"
    end
    if share == nil or share ~= math.floor(share) or share < 1 or share > SHARE_FULL then
        return nil, "--rgpu-share=" .. tostring(share) .. ": percent of each GPU, 1 to 100"
    end
    return gpus * share
end

-- "a:1,rgpu:50,b" without LICENSE, then LICENSE:units appended.
local function with_license(licenses, units)
    local kept = {}
    if licenses ~= nil and licenses ~= "" then
        for item in string.gmatch(licenses, "[^,]+") do
            local name = string.match(item, "^([^:]+)")
            if name ~= LICENSE then
                table.insert(kept, item)
            end
        end
    end
    table.insert(kept, LICENSE .. ":" .. units)
    return table.concat(kept, ",")
end

function rgpu_job_submit(job_desc)
    local units, err = rgpu_units(job_desc)
    if err ~= nil then
        slurm.log_user("rgpu: %s", err)
        return slurm.ERROR
    end
    if units ~= nil then
        job_desc.licenses = with_license(job_desc.licenses, units)
        slurm.log_debug("rgpu: job of uid %s counts %s:%d",
                        tostring(job_desc.user_id), LICENSE, units)
    end
    return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    return rgpu_job_submit(job_desc)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
